"""Upstream's real inputs end to end, tested without the hubs: ``milabench prepare`` and
``run`` of the real-input entries at smoke size, on tiny inputs in the real formats.

The loopback hub (tests/hubserver.py) serves, under the catalogue's repository ids, the
tiny inputs that each benchmark's own tests build (``tests/benchmarks/test_*_real_inputs``:
a byte-level BPE, Alpaca records and a two-shard Llama-3.1-style checkpoint of the
smoke size for the LLM entries, a tiny Llama checkpoint with its
tokenizer and wikitext parquet shards, a tiny LLaVA checkpoint with its processor and an
aokvqa parquet file, a tiny GPT-NeoX checkpoint with pythia's tokenizer and the
descriptiveness prompts), each repository at a commit of its own, and under its URL mirror
the URL inputs (OGB's PCQM4Mv2 zip and conformers, the SEH proxy's weights): the site's
mirror of docs/inputs.md, described by a ``MILABENCH_INPUTS_CATALOGUE`` file (those commits, those
files and their sha256). A suite file over config/standard-smoke.yaml points the entries at
the hub (``HF_HUB_OFFLINE=0``, ``HF_ENDPOINT``, ``MILABENCH_URL_MIRROR``, the catalogue
file; ``parity: same``); prepare must fetch and verify every input (files, manifests, the
hub's request log), the run must use them (``inputs`` records comparable) and the report
must count the entries comparable with upstream. The other case, every input missing,
is test_real_inputs_offline.py (it reads the session's shared smoke run: a file of its
own, so that this one, which needs no smoke run, starts early in the session).

``--use-current-env``: the test process's environment has every package these entries'
real paths need (RDKit included: the test extra has it).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import secrets
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import clirun
import pytest
from dimenetbases import seed_cache
from hubserver import LFS_SUFFIXES, HubServer
from needs import needs

from .conftest import BENCHMARKS, ROOT

needs("peft")
needs("tokenizers")
needs("pyarrow")
needs("PIL")
needs("rdkit")  # dimenet's and pna's prepare, recursiongfn's molecules

pytestmark = pytest.mark.slow

SMOKE = ROOT / "config" / "standard-smoke.yaml"
TOKEN = "hf_e2e_granted_token_0123456789abcdef"
#: Each real-input entry run here and the inputs its prepare.py fetches, in that order
#: (the LLM entries: the weights, at the smoke suite's ``--size tiny``, the tokenizer, the
#: data set).
_LLM_8B = ("llama3.1-8b", "llama3.1-8b-tokenizer", "alpaca-cleaned")
_LLM_70B = ("llama3.1-70b", "llama3.1-70b-tokenizer", "alpaca")
ENTRIES: dict[str, tuple[str, ...]] = {
    "llm-lora-single": _LLM_8B,
    "llm-lora-ddp-gpus": _LLM_8B,  # torchrun, 2 gloo ranks (FSDP2)
    "llm-lora-mp-gpus": _LLM_70B,
    "llm-full-mp-gpus": _LLM_70B,
    "llama": ("llama2-7b-chat", "llama2-tokenizer", "wikitext-103"),
    "llava-single": ("llava-1.5-7b", "the-cauldron-aokvqa"),
    "rlhf-single": ("pythia-1b-deduped", "pythia-160m", "descriptiveness-sentiment"),
    # URL inputs, not hub repositories: PCQM4Mv2 from OGB's hosts, the SEH proxy from GitHub
    "dimenet": ("pcqm4mv2",),
    "pna": ("pcqm4mv2",),
    "recursiongfn": ("bengio2021flow-proxy",),
}
#: What each entry's main.py says it ran instead (its ``inputs`` record's ``stand_in``).
STAND_IN = {
    **dict.fromkeys(
        [e for e in ENTRIES if e.startswith("llm-")], "random weights, 64-token random sequences"
    ),
    "llama": "random weights, 32 generated tokens per prompt",
    "llava-single": "random-weight LLaVA",
    "rlhf-single": "random-weight models",
}
STAND_IN.update(
    dict.fromkeys(["dimenet", "pna"], "generated PCQM4Mv2-shaped molecules"),
    recursiongfn="the SEH proxy network with random weights",
)
#: The tiny aokvqa file has 4 rows: a batch of 2 (the smoke suite's 8 makes none).
ARGV = {
    "llava-single": {"--batch-size": 2},
    # the tiny PCQM4Mv2 keeps 5 training molecules (test_geo_pcqm4mv2.py)
    "dimenet": {"--num-samples": 5, "--batch-size": 2},
    "pna": {"--num-samples": 5, "--batch-size": 2},
}
#: fetch's line for an input it cannot have (``--verbose`` prefixes it with ``[entry]``)
UNAVAILABLE = re.compile(r"milabench: input (\S+) for (\S+) unavailable: (.+)$", re.M)


def folder_files(folder: Path) -> dict[str, bytes]:
    """The files of an input folder built by a benchmark's test (its manifest left out)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "milabench-input.json"
    }


def tiny_inputs(work: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, bytes]]:
    """Every input of `ENTRIES` as {repository path: bytes}, built by the benchmarks' own
    test builders in the real formats."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchshared import catalogue

    from .test_geo_pcqm4mv2 import make_input as pcqm4mv2_input
    from .test_llama_real_inputs import make_inputs
    from .test_llava_real_inputs import build_dataset_input as llava_dataset
    from .test_llava_real_inputs import build_model_input as llava_model
    from .test_llm_real_inputs import alpaca_records, build_checkpoint, build_tokenizer
    from .test_rlhf import load_main
    from .test_rlhf_real_inputs import build_dataset_input as rlhf_dataset
    from .test_rlhf_real_inputs import build_model_input as rlhf_model
    from .test_rlhf_real_inputs import build_tokenizer_input as rlhf_tokenizer

    out: dict[str, dict[str, bytes]] = {}
    (work / "llm").mkdir(parents=True)
    build_tokenizer(work / "llm" / "tokenizer.json")
    out["alpaca-cleaned"] = {
        "alpaca_data_cleaned.json": json.dumps(alpaca_records(), indent=2).encode()
    }
    out["llama3.1-8b-tokenizer"] = out["llama3.1-70b-tokenizer"] = {
        "tokenizer.json": (work / "llm" / "tokenizer.json").read_bytes(),
        "original/tokenizer.model": b"not read by the benchmark\n",
    }
    out["llama3.1-8b"] = build_checkpoint(work / "llm" / "llama3.1-8b")
    out["llama3.1-70b"] = build_checkpoint(work / "llm" / "llama3.1-70b", seed=1)
    # tatsu-lab/alpaca's form: one parquet shard, a ``text`` column besides the fields
    table = pa.Table.from_pylist([{**r, "text": "unused"} for r in alpaca_records(30, seed=1)])
    pq.write_table(table, work / "alpaca.parquet")
    shard = catalogue.CATALOGUE["alpaca"].files[0]
    out["alpaca"] = {shard: (work / "alpaca.parquet").read_bytes()}
    for name, folder in make_inputs(work / "llama").items():
        out[name] = folder_files(folder)
    llava = load_main(BENCHMARKS / "llava", "llava_main_e2e", monkeypatch)
    llava_model(work / "llava" / "llava-1.5-7b", llava)
    llava_dataset(work / "llava" / "the-cauldron-aokvqa")
    rlhf = load_main(BENCHMARKS / "rlhf", "rlhf_main_e2e", monkeypatch)
    rlhf_tokenizer(work / "rlhf" / "pythia-1b-deduped")
    rlhf_model(work / "rlhf" / "pythia-160m", rlhf)
    rlhf_dataset(work / "rlhf" / "descriptiveness-sentiment")
    for sub in ("llava", "rlhf"):
        for folder in sorted((work / sub).iterdir()):
            out[folder.name] = folder_files(folder)
    out["pcqm4mv2"] = folder_files(pcqm4mv2_input(work / "geo"))
    out["bengio2021flow-proxy"] = {
        "bengio2021flow_proxy.pkl.gz": proxy_weights(work / "bengio2021flow_proxy.pkl.gz")
    }
    assert set(out) == {n for names in ENTRIES.values() for n in names}
    return out


def proxy_weights(path: Path) -> bytes:
    """Random weights of recursiongfn's SEH proxy in load_original_model's format (the
    writer of tests/benchmarks/test_recursiongfn.py), written to `path`."""
    import torch

    from .test_recursiongfn import GFN, write_params

    sys.path.insert(0, str(GFN))
    try:
        proxy = importlib.import_module("proxy")
        torch.manual_seed(5)
        write_params(path, proxy.MPNNet(), proxy)
    finally:
        sys.path.remove(str(GFN))
        for name, module in list(sys.modules.items()):  # its modules are top-level names
            if str(getattr(module, "__file__", "")).startswith(str(GFN)):
                del sys.modules[name]
    return path.read_bytes()


def publish(hub: HubServer, files: dict[str, dict[str, bytes]]) -> dict[str, Any]:
    """Each input as a repository of the hub under the catalogue's id, at a commit of the
    mirror's own (inputs of one repository, as Llama-3.1's weights and tokenizer, share
    it and its commit); returns the override catalogue that describes them."""
    from benchshared import catalogue

    by_repo: dict[str, list[str]] = {}
    records: dict[str, Any] = {}
    for name, content in files.items():
        spec = catalogue.CATALOGUE[name]
        if spec.kind == "url":  # the mirror's copy of each URL, with its own sha256
            for item in spec.files:
                hub.add_url(item.url, content[item.path])
            records[name] = {
                "revision": f"mirror-{secrets.token_hex(4)}",
                "revision_source": "the test's loopback mirror",
                "files": [
                    {"url": item.url, "path": item.path,
                     "sha256": hashlib.sha256(content[item.path]).hexdigest()}
                    for item in spec.files
                ],
            }  # fmt: skip
        else:
            by_repo.setdefault(spec.repo_id, []).append(name)
    for repo_id, names in by_repo.items():
        spec = catalogue.CATALOGUE[names[0]]
        commit = secrets.token_hex(20)
        content = {rel: data for name in names for rel, data in files[name].items()}
        hub.add_repo(repo_id, content, repo_type=spec.repo_type, commit=commit,
                     gated=spec.gated, granted={TOKEN})  # fmt: skip
        for name in names:
            records[name] = {
                "revision": commit,
                "revision_source": "the test's loopback mirror",
                "files": sorted(files[name]),
                "sha256": {
                    rel: hashlib.sha256(data).hexdigest() for rel, data in files[name].items()
                },
            }
    return {"inputs": records}


def suite(path: Path, star: dict[str, Any]) -> Path:
    """A suite file: the smoke suite, ``star`` merged into its ``"*"``, `ARGV` added."""
    lines = [f"include: {json.dumps(str(SMOKE))}", '"*":']
    lines += [f"  {key}: {json.dumps(value)}" for key, value in star.items()]
    for entry, argv in ARGV.items():
        lines += [f"{entry}:", "  argv:"] + [f"    {k}: {v}" for k, v in argv.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def milabench(*args: str, config: Path, base: Path, env: dict[str, str] | None = None,
              timeout: float = 600, select: Iterable[str] = ENTRIES) -> Any:  # fmt: skip
    """``milabench ARGS`` on `config` and `base` in the current environment, the entries
    of `select` (default `ENTRIES`) selected."""
    return clirun.milabench(
        *args, "--config", str(config), "--base", str(base), "--use-current-env",
        "--select", ",".join(select), env=env, timeout=timeout,
    )  # fmt: skip


def inputs_records(folder: Path, entry: str) -> list[dict[str, Any]]:
    """The ``inputs`` records of `entry`'s run files in the run folder `folder`."""
    files = sorted(folder.glob(f"{entry}.data")) + sorted(folder.glob(f"{entry}.*.data"))
    assert files, f"no run file of {entry} in {folder}"
    events = [json.loads(line) for f in files for line in f.read_text().splitlines() if line]
    return [
        e["data"]["inputs"]
        for e in events
        if e["event"] == "data" and e["data"].get("task") == "inputs"
    ]


def upstream_report(config: Path, base: Path, run: str) -> dict[str, Any]:
    done = milabench("report", "--runs", str(base / "runs" / run), "--format", "json",
                     config=config, base=base, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["upstream"]


def run_and_check(config: Path, base: Path, env: dict[str, str] | None = None) -> Path:
    """``milabench run`` (run name ``e2e``): every selected entry passes; its folder."""
    done = milabench("run", "--run-name", "e2e", config=config, base=base, env=env, timeout=900)
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-4000:])
    report = json.loads((base / "runs" / "e2e" / "report.json").read_text())
    rows = {row["name"]: row for row in report["benchmarks"]}
    for entry in ENTRIES:
        assert rows[entry]["fail"] == 0 and rows[entry]["n"] >= 1, rows.get(entry)
    return base / "runs" / "e2e"


def test_prepared_inputs_are_fetched_verified_used_and_counted_comparable(
    tmp_path, tmp_path_factory, monkeypatch
):
    """Prepare fetches every input from the mirror the override catalogue describes and
    verifies it; the runs use them and the report counts each entry comparable."""
    from benchshared import catalogue

    start = time.monotonic()
    files = tiny_inputs(tmp_path / "build", monkeypatch)
    base = tmp_path / "base"
    with HubServer(tokens={TOKEN}) as hub:
        override = publish(hub, files)
        catalogue_file = tmp_path / "mirror-catalogue.json"
        catalogue_file.write_text(json.dumps(override, indent=2))
        config = suite(
            tmp_path / "e2e.yaml",
            {
                "parity": "same",
                "env": {
                    "HF_HUB_OFFLINE": "0",
                    "HF_ENDPOINT": hub.endpoint,
                    "MILABENCH_URL_MIRROR": hub.url_mirror,
                    "MILABENCH_INPUTS_CATALOGUE": str(catalogue_file),
                },
            },
        )
        env = {"HF_TOKEN": TOKEN}  # two of the repositories are gated, as upstream's are
        prep = milabench("prepare", "--verbose", config=config, base=base, env=env)
        assert prep.returncode == 0, (prep.stdout[-4000:], prep.stderr[-4000:])
        assert not UNAVAILABLE.findall(prep.stdout + prep.stderr), prep.stderr[-4000:]
        # every file asked of the hub at the mirror's commit; LFS files got from its CDN host
        asked = [(r.method, unquote(r.path)) for r in hub.requests]
        for name, content in files.items():
            revision = override["inputs"][name]["revision"]
            spec = catalogue.CATALOGUE[name]
            if spec.kind == "url":
                for item in spec.files:
                    assert ("GET", "/url/" + item.url.split("//", 1)[1]) in asked, item.url
                continue
            for rel, data in content.items():
                assert any(p.endswith(f"/resolve/{revision}/{rel}") for _, p in asked), (name, rel)
                if rel.endswith(LFS_SUFFIXES):
                    assert ("GET", f"/lfs/{hashlib.sha256(data).hexdigest()}") in asked, rel
        denied = [r for r in hub.requests if "authorization" not in r.headers
                  and "Llama" in r.path and "/lfs/" not in r.path]  # fmt: skip
        assert not denied, [r.path for r in denied]  # the gated ones asked with the token
    for name, content in files.items():  # verified and kept, manifest last
        folder = base / "data" / "inputs" / name
        manifest = json.loads((folder / "milabench-input.json").read_text())
        assert manifest["revision"] == override["inputs"][name]["revision"], name
        assert manifest["files"] == {
            rel: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for rel, data in content.items()
        }, name
        for rel, data in content.items():
            assert (folder / rel).read_bytes() == data, (name, rel)

    seed_cache(tmp_path_factory, base / "cache")  # DimeNet's bases, made once a session
    run = run_and_check(config, base)
    for entry, names in ENTRIES.items():
        (record,) = inputs_records(run, entry)
        assert record["entry"] == entry and record["comparable"] is True, record
        assert record["missing"] == [] and "stand_in" not in record, record
        assert record["real"] == {n: override["inputs"][n]["revision"] for n in names}
    upstream = upstream_report(config, base, "e2e")
    assert set(ENTRIES) <= set(upstream["comparable"]), upstream
    assert not {o["name"] for o in upstream["not_comparable"]} & set(ENTRIES), upstream
    print(f"e2e with the mirror: {time.monotonic() - start:.0f} s")
