#!/usr/bin/env python3
"""Upstream milabench's recorded rates and memory, entry by entry, to put ours beside.

    python scripts/upstream_rates.py UPSTREAM_GIT_DIR [--commit C] [--memory F] [--out F]

Reads upstream's sizing files (``config/scaling/<GPU>.yaml`` at one commit of a clone or
mirror of github.com/mila-iqia/milabench, read with ``git show``: no work tree needed)
and writes ``config/upstream_rates.yaml``: for every entry of ``upstream_memory.yaml``
(the standard suite's entries at their batch sizes), upstream's ``perf`` and memory at
that same batch size on each GPU, their medians and count, whether the figure is per
GPU (``per_gpu`` entries) or for a whole node (torchrun, njobs), and the exclusions that
``upstream_memory.yaml`` makes of the same runs (an older upstream entry). The commit
and the GPU files default to ``upstream_memory.yaml``'s ``source`` and ``gpus``. The
report (`milabench.report.upstream_rates`) and first light put each run beside these.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "benchmarks" / "data"
MEMORY = DATA / "upstream_memory.yaml"
OUT = ROOT / "config" / "upstream_rates.yaml"
SUITE = ROOT / "config" / "standard.yaml"
#: A system for loading the suite: every entry enabled, plans resolved.
SYSTEM = {
    "arch": "cuda",
    "gpu": {"count": 8, "capacity": "143771 MiB"},
    "cpu": {"count": 64},
    "nodes": [{"name": "n0", "ip": "10.0.0.1", "main": True}, {"name": "n1", "ip": "10.0.0.2"}],
}

HEADER = """\
# Upstream milabench's recorded rates and memory for the entries of config/standard.yaml,
# at the batch size our suite runs them with. Written by scripts/upstream_rates.py (do
# not edit by hand; run it again on a newer upstream commit).
#
# Source: {repository} at commit {commit},
# files config/scaling/<GPU>.yaml. Each observation there is one run of the entry at one
# batch size; `perf` is its rate in the entry's own unit (items/s, tokens/s, ...), the
# unit this suite's report gives; `memory_mib` the most GPU memory in use its monitor
# saw (NVML's "used"). `rates`: every run at our batch size; `median`, `memory_median`
# and `n`: of those not `excluded` (upstream_memory.yaml's exclusion of the same run: an
# older upstream entry). `per`: `gpu` for an entry that runs one process per GPU
# (upstream's figure is one GPU's), `node` for one that uses every GPU of its node
# (torchrun, njobs: the figure is the node's, on as many GPUs as upstream's machine had:
# its H100 and H200 figures for diffusion-gpus are 3.9 and 8.0 times diffusion-single's).
# Figures only.
"""


class RatesError(RuntimeError):
    """The upstream files or our data cannot be read; the message is one line."""


class _Flow(dict):
    """A mapping written on one line (one upstream run)."""


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, with `_Flow` mappings in flow style."""


_Dumper.add_representer(
    _Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True)
)


def git_show(git_dir: Path, commit: str, path: str) -> str:
    """The text of ``path`` at ``commit`` in the repository at ``git_dir``."""
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RatesError(f"git show {commit}:{path} in {git_dir}: {done.stderr.strip()}")
    return done.stdout


def mib(value: object) -> int | None:
    """``"13862 MiB"`` (upstream's form) or a number, as whole MiB."""
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value.strip().endswith("MiB"):
        return int(float(value.strip()[:-3]))
    return None


def exclusions(memory: dict) -> dict[tuple[str, str, int], str]:
    """(entry, gpu, memory MiB) -> why upstream_memory.yaml excludes that run."""
    out = {}
    for entry, info in (memory.get("entries") or {}).items():
        for obs in (info or {}).get("observations") or []:
            if obs.get("excluded"):
                out[(entry, obs["gpu"], int(obs["memory_mib"]))] = str(obs["excluded"])
    return out


def scopes(suite_path: Path = SUITE) -> dict[str, str]:
    """entry -> ``gpu`` (one process per GPU) or ``node`` (every GPU of the node)."""
    from milabench.config import load_suite

    suite = load_suite(suite_path, system=SYSTEM)
    return {
        name: ("gpu" if entry.plan.method == "per_gpu" else "node")
        for name, entry in suite.all_entries.items()
    }


def entry_rates(name: str, batch: int, sizing: dict[str, dict], excluded: dict) -> list[dict]:
    """One record per GPU with a run of ``name`` at ``batch``: its runs, the median rate
    and the median memory (MiB) of those not excluded."""
    out = []
    for gpu, data in sizing.items():
        runs = [o for o in ((data.get(name) or {}).get("observations") or [])
                if o.get("batch_size") == batch and o.get("perf") is not None]  # fmt: skip
        if not runs:
            continue
        rates, kept, memory = [], [], []
        for run in runs:
            rate = {"perf": round(float(run["perf"]), 2), "memory_mib": mib(run.get("memory"))}
            why = excluded.get((name, gpu, rate["memory_mib"]))
            if why:
                rate["excluded"] = why
            else:
                kept.append(rate["perf"])
                if rate["memory_mib"] is not None:
                    memory.append(rate["memory_mib"])
            rates.append(rate)
        record = {"gpu": gpu, "rates": rates, "n": len(kept)}
        record["median"] = round(statistics.median(kept), 2) if kept else None
        record["memory_median"] = round(statistics.median(memory)) if memory else None
        out.append(record)
    return out


def build(git_dir: Path, commit: str | None = None, memory_path: Path = MEMORY,
          suite_path: Path = SUITE) -> dict:  # fmt: skip
    """The data of upstream_rates.yaml (see the module docstring)."""
    memory = yaml.safe_load(memory_path.read_text())
    source = memory.get("source") or {}
    commit = commit or source.get("commit")
    if not commit:
        raise RatesError(f"{memory_path}: no source.commit, and no --commit given")
    sizing = {}
    for gpu, info in (memory.get("gpus") or {}).items():
        if (info or {}).get("file"):
            sizing[gpu] = yaml.safe_load(git_show(git_dir, commit, info["file"])) or {}
    per = scopes(suite_path)
    excluded = exclusions(memory)
    entries = {}
    for name, info in (memory.get("entries") or {}).items():
        batch = (info or {}).get("batch_size")
        records = entry_rates(name, batch, sizing, excluded) if batch is not None else []
        if records:
            if name not in per:
                raise RatesError(f"{memory_path}: {name} is no entry of {suite_path}")
            entries[name] = {"batch_size": batch, "per": per[name], "observations": records}
    files = {g: memory["gpus"][g]["file"] for g in sizing}
    repository = source.get("repository", "mila-iqia/milabench")
    return {
        "source": {"repository": repository, "commit": commit, "files": files},
        "entries": entries,
    }


def dump(data: dict) -> str:
    """The file's text: the header, then the data with one flow-style line per run."""
    for entry in data["entries"].values():
        for record in entry["observations"]:
            record["rates"] = [_Flow(r) for r in record["rates"]]
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100)
    return HEADER.format(**data["source"]) + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir", type=Path, help="a clone or mirror of upstream milabench")
    parser.add_argument("--commit", help="default: upstream_memory.yaml's source.commit")
    parser.add_argument(
        "--memory",
        type=Path,
        default=MEMORY,
        help="the entries, batch sizes, GPU files and exclusions to read",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    try:
        data = build(args.git_dir, args.commit, args.memory)
    except (RatesError, OSError) as err:
        print(f"upstream_rates: error: {err}", file=sys.stderr)
        return 1
    args.out.write_text(dump(data))
    total = sum(len(e["observations"]) for e in data["entries"].values())
    print(f"upstream_rates: {len(data['entries'])} entries, {total} (entry, GPU) figures "
          f"-> {args.out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
