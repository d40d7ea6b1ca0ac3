"""benchshared.inputs: real inputs fetched from a Hugging Face Hub on loopback
(tests/hubserver.py) and from plain URLs, verified, manifest written last, and one line
on stderr for whatever is unavailable.

The catalogue's own records are used (real repository ids, revisions and pins); the
loopback hub serves tiny files in the real formats under those ids.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hubserver import HubServer, json_bytes, safetensors_bytes

from benchshared import catalogue, inputs
from benchshared.inputs import MANIFEST, PREFIX, announce, fetch, locate, read_manifest

SHARED = Path(__file__).resolve().parents[2] / "benchmarks" / "_shared"
TOKEN, OTHER = "hf_granted_token_0123456789abcdef", "hf_other_token_0123456789abcdef"
BIG = 24 * 2**20  # above huggingface_hub's 10 MiB read chunk: a cut leaves data to resume


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A started loopback hub; the hub client's variables point at it (no token set)."""
    for name in ("HF_TOKEN", "MILABENCH_HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    with HubServer(tokens={TOKEN, OTHER}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("MILABENCH_URL_MIRROR", server.url_mirror)
        yield server


def tokenizer_files() -> dict[str, bytes]:
    return {
        "original/tokenizer.model": b"IQ== 0\nIg== 1\n" * 64,
        "tokenizer.json": json_bytes({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}),
        "tokenizer_config.json": json_bytes({"model_max_length": 131072}),
        "special_tokens_map.json": json_bytes({"bos_token": "<|begin_of_text|>"}),
        "LICENSE": b"LLAMA 3.1 COMMUNITY LICENSE AGREEMENT\n",
    }


def add_gated_tokenizer(hub: HubServer) -> None:
    spec = catalogue.get("llama3.1-8b-tokenizer")
    hub.add_repo(spec.repo_id, tokenizer_files(), commit=spec.revision, gated=True, granted={TOKEN})


def add_llava(hub: HubServer, shard_size: int = 0) -> dict[str, bytes]:
    spec = catalogue.get("llava-1.5-7b")
    shard = safetensors_bytes({"w": ("F32", [8, 8])})
    files = {
        "config.json": json_bytes({"model_type": "llava"}),
        "preprocessor_config.json": json_bytes({"crop_size": {"height": 336}}),
        "model-00001-of-00002.safetensors": shard + b"\0" * shard_size,
        "model-00002-of-00002.safetensors": safetensors_bytes({"b": ("BF16", [8])}),
        "model.safetensors.index.json": json_bytes({"weight_map": {"w": "model-00001"}}),
        "tokenizer.model": b"\x0a\x05<unk>" * 40,
        "README.md": b"# llava\n",
        "extra/notes.json": b"{}\n",
    }
    hub.add_repo(spec.repo_id, files, commit=spec.revision)
    return files


def add_alpaca_cleaned(hub: HubServer) -> bytes:
    data = json_bytes([{"instruction": "Say hi.", "input": "", "output": "Hi."}])
    spec = catalogue.get("alpaca-cleaned")
    hub.add_repo(spec.repo_id, {"alpaca_data_cleaned.json": data}, repo_type="dataset")
    return data


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- fetch, verify, manifest, locate -------------------------------------------------------------


def test_fetch_writes_the_manifest_last_and_locate_finds_it(hub, tmp_path):
    data = add_alpaca_cleaned(hub)
    root = tmp_path / "inputs"
    assert locate("alpaca-cleaned", root) is None

    found = fetch(["alpaca-cleaned"], entry="llm-lora-single", root=root, err=io.StringIO())

    folder = root / "alpaca-cleaned"
    assert found == {"alpaca-cleaned": folder} and locate("alpaca-cleaned", root) == folder
    assert (folder / "alpaca_data_cleaned.json").read_bytes() == data
    manifest = read_manifest(folder)
    commit = hub.repos[("dataset", "yahma/alpaca-cleaned")].commit
    assert manifest == {
        "name": "alpaca-cleaned",
        "source": "hf://datasets/yahma/alpaca-cleaned",
        "revision": commit,  # "main" resolved to the commit the hub served
        "files": {
            "alpaca_data_cleaned.json": {
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            }
        },
    }
    assert [r.path for r in hub.requests if "resolve" in r.path][-1].startswith(
        f"/datasets/yahma/alpaca-cleaned/resolve/{commit}/"
    )

    asked = len(hub.requests)
    again = fetch(["alpaca-cleaned"], entry="llm-lora-single", root=root, err=io.StringIO())
    assert again == found and len(hub.requests) == asked  # present: not fetched again

    (folder / "alpaca_data_cleaned.json").write_bytes(b"[]")  # damaged: size differs
    assert locate("alpaca-cleaned", root) is None


def test_patterns_take_only_the_files_the_benchmark_reads(hub, tmp_path):
    files = add_llava(hub)
    found = fetch(["llava-1.5-7b"], entry="llava-single", root=tmp_path, err=io.StringIO())
    folder = found["llava-1.5-7b"]
    assert folder is not None
    manifest = read_manifest(folder)
    assert manifest["revision"] == catalogue.get("llava-1.5-7b").revision
    assert sorted(manifest["files"]) == sorted(
        p for p in files if p not in ("README.md", "extra/notes.json")
    )
    for rel, info in manifest["files"].items():
        assert (folder / rel).read_bytes() == files[rel]
        assert info["sha256"] == hashlib.sha256(files[rel]).hexdigest()
    assert hub.gets("/api/models/llava-hf/llava-1.5-7b-hf/tree/")  # the listing was read


def test_matches_never_crosses_a_folder():
    assert inputs.matches("*.json", "config.json")
    assert not inputs.matches("*.json", "extra/notes.json")
    assert inputs.matches(
        "wikitext-103-v1/*.parquet", "wikitext-103-v1/train-00000-of-00002.parquet"
    )
    assert not inputs.matches("wikitext-103-v1/*.parquet", "wikitext-2-v1/test.parquet")


# -- resume and verification ---------------------------------------------------------------------


def test_a_cut_connection_resumes_with_a_range_request(hub, tmp_path):
    files = add_llava(hub, shard_size=BIG)
    shard = "model-00001-of-00002.safetensors"
    hub.cut_once(f"llava-hf/llava-1.5-7b-hf/{shard}", at=BIG // 2)

    found = fetch(["llava-1.5-7b"], entry="llava-single", root=tmp_path, err=io.StringIO())

    assert found["llava-1.5-7b"] is not None
    assert (tmp_path / "llava-1.5-7b" / shard).read_bytes() == files[shard]
    blob = hashlib.sha256(files[shard]).hexdigest()
    gets = hub.gets(f"/lfs/{blob}")
    assert len(gets) == 2 and "range" not in gets[0].headers
    # the client kept the whole 10 MiB blocks it had read before the cut
    assert gets[1].headers["range"] == f"bytes={10 * 2**20}-"


def test_a_checksum_against_the_catalogue_pin_is_refused(hub, tmp_path):
    spec = catalogue.get("alpaca")  # the catalogue pins this parquet file's sha256
    rel = spec.files[0]
    hub.add_repo(spec.repo_id, {rel: b"PAR1 not the real file PAR1"}, repo_type="dataset",
                 commit=spec.revision)  # fmt: skip
    err = io.StringIO()
    found = fetch(["alpaca"], entry="llm-full-mp-gpus", root=tmp_path, err=err)

    assert found == {"alpaca": None}
    [line] = lines_of(err.getvalue())
    assert line.startswith(f"{PREFIX} alpaca for llm-full-mp-gpus unavailable: {rel}: sha256 ")
    assert "(file deleted)" in line
    assert not (tmp_path / "alpaca" / rel).exists()
    assert not (tmp_path / "alpaca" / MANIFEST).exists()


def test_corrupted_bytes_are_refused_against_the_hubs_lfs_sha256(hub, tmp_path):
    files = add_llava(hub)
    shard = "model-00002-of-00002.safetensors"
    hub.corrupt(f"llava-hf/llava-1.5-7b-hf/{shard}")
    err = io.StringIO()
    found = fetch(["llava-1.5-7b"], entry="llava-single", root=tmp_path, err=err)

    assert found == {"llava-1.5-7b": None}
    [line] = lines_of(err.getvalue())
    assert f"unavailable: {shard}: sha256 " in line
    assert not (tmp_path / "llava-1.5-7b" / shard).exists()
    assert locate("llava-1.5-7b", tmp_path) is None

    # the next prepare downloads only what is missing: the refused file, and those after it
    hub.corrupt(f"llava-hf/llava-1.5-7b-hf/{shard}", on=False)
    found = fetch(["llava-1.5-7b"], entry="llava-single", root=tmp_path, err=io.StringIO())
    assert found["llava-1.5-7b"] is not None
    first = hashlib.sha256(files["model-00001-of-00002.safetensors"]).hexdigest()
    assert len(hub.gets(f"/lfs/{first}")) == 1
    assert len(hub.gets(f"/lfs/{hashlib.sha256(files[shard]).hexdigest()}")) == 2


# -- gated repositories ---------------------------------------------------------------------------


def run_fetch(names: list[str], entry: str, root: Path, **env: str) -> subprocess.CompletedProcess:
    """`fetch` in a fresh interpreter (its real stderr, no test harness around it)."""
    program = (
        "import json, sys\n"
        "from benchshared.inputs import fetch\n"
        "found = fetch(json.loads(sys.argv[1]), entry=sys.argv[2], root=sys.argv[3])\n"
        "print(json.dumps({k: str(v) if v else None for k, v in found.items()}))\n"
    )
    environ = {**os.environ, "PYTHONPATH": str(SHARED), **env}
    return subprocess.run(
        [sys.executable, "-c", program, json.dumps(names), entry, str(root)],
        capture_output=True, text=True, env=environ, timeout=120,
    )  # fmt: skip


def test_gated_without_token_is_one_line_naming_input_entry_and_fix(hub, tmp_path):
    add_gated_tokenizer(hub)
    done = run_fetch(["llama3.1-8b-tokenizer"], "llm-lora-single", tmp_path)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"llama3.1-8b-tokenizer": None}
    assert lines_of(done.stderr) == [
        f"{PREFIX} llama3.1-8b-tokenizer for llm-lora-single unavailable: "
        "meta-llama/Llama-3.1-8B is gated and no HF_TOKEN is set (HTTP 401); accept the "
        "licence at https://huggingface.co/meta-llama/Llama-3.1-8B and set HF_TOKEN "
        "(then milabench prepare)"
    ]


def test_gated_with_a_granted_token_is_fetched(hub, tmp_path, monkeypatch):
    add_gated_tokenizer(hub)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    found = fetch(["llama3.1-8b-tokenizer"], entry="llm-lora-single", root=tmp_path)

    folder = found["llama3.1-8b-tokenizer"]
    assert folder is not None
    assert (folder / "original" / "tokenizer.model").read_bytes() == tokenizer_files()[
        "original/tokenizer.model"
    ]
    assert "LICENSE" not in read_manifest(folder)["files"]
    resolves = [r for r in hub.requests if "/resolve/" in r.path]
    assert resolves and all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in resolves)
    # the LFS blob comes from another host: the token is not sent there
    assert all("authorization" not in r.headers for r in hub.gets("/lfs/"))


@pytest.mark.parametrize(
    ("variable", "token", "cause"),
    [
        ("HF_TOKEN", OTHER, "this token's account has not been granted access"),
        ("MILABENCH_HF_TOKEN", "hf_unknown", "the hub refused HF_TOKEN"),
    ],
)
def test_a_token_without_access_is_one_line(hub, tmp_path, monkeypatch, variable, token, cause):
    add_gated_tokenizer(hub)
    monkeypatch.setenv(variable, token)
    err = io.StringIO()
    found = fetch(["llama3.1-8b-tokenizer"], entry="llm-lora-ddp-gpus", root=tmp_path, err=err)
    assert found == {"llama3.1-8b-tokenizer": None}
    [line] = lines_of(err.getvalue())
    assert line.startswith(f"{PREFIX} llama3.1-8b-tokenizer for llm-lora-ddp-gpus unavailable: ")
    assert cause in line and "https://huggingface.co/meta-llama/Llama-3.1-8B" in line


def test_a_missing_file_is_one_line(hub, tmp_path):
    spec = catalogue.get("pythia-160m")
    hub.add_repo(spec.repo_id, {"config.json": b"{}\n"}, commit=spec.revision)  # no weights
    err = io.StringIO()
    assert fetch(["pythia-160m"], entry="rlhf-single", root=tmp_path, err=err) == {
        "pythia-160m": None
    }
    [line] = lines_of(err.getvalue())
    assert "unavailable: a file of EleutherAI/pythia-160m not found" in line
    assert "HTTP 404" in line


# -- no network -----------------------------------------------------------------------------------


def prepared_by_hand(root: Path, name: str) -> Path:
    """An input folder as fetch leaves it: files at their paths, manifest last."""
    folder = root / name
    (folder / "wikitext-103-v1").mkdir(parents=True)
    data = b"PAR1 tiny PAR1"
    (folder / "wikitext-103-v1" / "test-00000-of-00001.parquet").write_bytes(data)
    files = {
        "wikitext-103-v1/test-00000-of-00001.parquet": {
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
        }
    }
    manifest = {"name": name, "source": "hf://datasets/Salesforce/wikitext", "revision": "x"}
    (folder / MANIFEST).write_text(json.dumps({**manifest, "files": files}))
    return folder


def test_offline_prints_one_line_per_missing_input(hub, tmp_path):
    present = prepared_by_hand(tmp_path, "wikitext-103")
    names = ["llama2-7b-chat", "wikitext-103", "llama2-tokenizer"]
    done = run_fetch(names, "llama", tmp_path, HF_HUB_OFFLINE="1")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "llama2-7b-chat": None,
        "wikitext-103": str(present),
        "llama2-tokenizer": None,
    }
    assert lines_of(done.stderr) == [
        f"{PREFIX} {name} for llama unavailable: offline (HF_HUB_OFFLINE=1) and not "
        f"prepared; {inputs.OFFLINE_FIX}"
        for name in ("llama2-7b-chat", "llama2-tokenizer")
    ]
    assert hub.requests == []


def test_an_unreachable_endpoint_is_one_line_per_input(tmp_path, monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    started = time.monotonic()
    done = run_fetch(
        ["pythia-1b-deduped", "bengio2021flow-proxy"], "rlhf-single", tmp_path / "in",
        HF_ENDPOINT=f"http://127.0.0.1:{port}", MILABENCH_URL_MIRROR=f"http://127.0.0.1:{port}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = lines_of(done.stderr)
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith(
        f"{PREFIX} pythia-1b-deduped for rlhf-single unavailable: 127.0.0.1:{port} unreachable"
    )
    # asked once, before the hub client's retries: an offline machine is told at once
    assert time.monotonic() - started < 20
    assert lines[1].startswith(
        f"{PREFIX} bengio2021flow-proxy for rlhf-single unavailable: 127.0.0.1:{port} unreachable"
    )
    assert "Traceback" not in done.stderr


def test_an_unwritable_data_folder_is_one_line_per_input(hub):
    if not Path("/sys/kernel").is_dir():  # asked here, not at collection (macOS collects)
        pytest.skip("needs Linux's /sys")
    add_alpaca_cleaned(hub)
    hub.add_url(catalogue.get("bengio2021flow-proxy").files[0].url, b"proxy")
    root = Path("/sys/milabench-inputs")  # mkdir there fails with EPERM, even for root
    err = io.StringIO()
    names = ["alpaca-cleaned", "bengio2021flow-proxy"]
    assert fetch(names, entry="x", root=root, err=err) == dict.fromkeys(names)
    lines = lines_of(err.getvalue())
    assert [line.split(" unavailable: ")[1].split(" (")[0] for line in lines] == [
        f"cannot write {root / name}" for name in names
    ]
    assert all("make $MILABENCH_DIR_DATA writable" in line for line in lines)


# -- plain URLs -----------------------------------------------------------------------------------


def test_a_url_input_resumes_after_a_cut_and_is_verified(hub, tmp_path, monkeypatch):
    spec = catalogue.get("bengio2021flow-proxy")
    item = spec.files[0]
    data = bytes(range(256)) * 4096  # 1 MiB, verified against a mirror's sha256 of it
    mirror = tmp_path / "mirror.json"
    files = [{"url": item.url, "path": item.path, "sha256": hashlib.sha256(data).hexdigest()}]
    mirror.write_text(json.dumps({"inputs": {spec.name: {"files": files}}}))
    monkeypatch.setenv(catalogue.OVERRIDE_VARIABLE, str(mirror))
    hub.add_url(item.url, data)
    key = "/" + item.url.split("//", 1)[1]
    hub.cut_once(key, at=300_000)

    found = fetch([spec.name], entry="recursiongfn", root=tmp_path, err=io.StringIO())

    folder = found[spec.name]
    assert folder is not None and (folder / item.path).read_bytes() == data
    assert read_manifest(folder)["revision"] == catalogue.GFLOWNET_PROXY_COMMIT
    gets = hub.gets("/url/github.com/")
    assert len(gets) == 2 and gets[1].headers["range"] == "bytes=300000-"
    assert not (folder / f"{item.path}.part").exists()


def test_the_proxy_weights_are_checked_against_their_pinned_sha256(hub, tmp_path):
    spec = catalogue.get("bengio2021flow-proxy")
    assert spec.files[0].sha256 and spec.revision in spec.files[0].url
    hub.add_url(spec.files[0].url, b"not the proxy's weights")
    err = io.StringIO()
    assert fetch([spec.name], entry="recursiongfn", root=tmp_path, err=err) == {spec.name: None}
    [line] = lines_of(err.getvalue())
    assert "unavailable: bengio2021flow_proxy.pkl.gz: sha256 " in line, line


def test_a_url_input_with_a_wrong_md5_is_refused(hub, tmp_path):
    spec = catalogue.get("pcqm4mv2")
    for item in spec.files:
        hub.add_url(item.url, b"PK\x03\x04 not OGB's archive")
    err = io.StringIO()
    assert fetch(["pcqm4mv2"], entry="dimenet", root=tmp_path, err=err) == {"pcqm4mv2": None}
    [line] = lines_of(err.getvalue())
    assert "unavailable: pcqm4m-v2-train.sdf.tar.gz: md5 " in line
    assert not (tmp_path / "pcqm4mv2" / "pcqm4m-v2-train.sdf.tar.gz").exists()


def test_a_url_answering_404_is_one_line(hub, tmp_path):
    err = io.StringIO()
    assert fetch(["bengio2021flow-proxy"], entry="recursiongfn", root=tmp_path, err=err) == {
        "bengio2021flow-proxy": None
    }
    [line] = lines_of(err.getvalue())
    assert "unavailable: 127.0.0.1" in line and "HTTP 404" in line and "github.com" in line


# -- announce --------------------------------------------------------------------------------------


def test_announce_writes_the_inputs_record_on_the_data_channel(tmp_path, monkeypatch, capsys):
    from benchkit.channel import DataWriter

    monkeypatch.delenv("RANK", raising=False)
    present = prepared_by_hand(tmp_path, "wikitext-103")
    read_fd, write_fd = os.pipe()
    try:
        writer = DataWriter(fd=write_fd, smuggle=False)
        record = announce(
            "llama",
            {"wikitext-103": present, "llama2-7b-chat": None},
            stand_in="random weights",
            writer=writer,
        )
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            [line] = pipe.read().decode().splitlines()
    finally:
        for fd in (read_fd, write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
    sent = json.loads(line)
    assert sent == json.loads(json.dumps(record))
    assert sent["task"] == "inputs"
    assert sent["inputs"] == {
        "entry": "llama",
        "comparable": False,
        "real": {"wikitext-103": "x"},
        "missing": ["llama2-7b-chat"],
        "stand_in": "random weights",
    }
    assert "not comparable with upstream milabench" in capsys.readouterr().out

    monkeypatch.setenv("RANK", "1")
    assert announce("llama", {"wikitext-103": present}, writer=writer) is None
