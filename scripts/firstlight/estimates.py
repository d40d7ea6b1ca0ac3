"""The start-up memory estimates a first light makes on the GPU, made here beforehand.

On a GPU every torch entry estimates its memory when it starts (`benchkit.memory`'s
``check_memory``: its model built on the meta device, one step measured at the configured
batch) before it builds anything; on a CPU it does not, so a CPU rehearsal of first light
never makes them. This module makes them as the GPU machine will: each entry at
``config/first-light.yaml``'s sizes for one GPU (`lent_system`), with the Python given
(the copy of the GPU machine's), from the tree given, one process per entry, timed. The
time is spent inside the entry's own time on the GPU, and an estimate that fails there
costs the entry its memory check and its ``estimate MiB`` column, never its run.

`jobs` reads the suite with this checkout's milabench (omegaconf); `estimate` runs the
jobs with any Python that has torch and the benchmarks' frameworks.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

#: The machine lent for first light, as its entries see it: one H200 (143,771 MiB as
#: NVML reads it) and 16 cores (the device notes).
LENT_GPU_MIB = 143771
LENT_CPUS = 16
#: One entry's estimate may take this long here before it counts as stuck.
TIMEOUT_S = 600.0

#: Runs in the entry's folder with the benchmark's options: imports what the entry has
#: imported by the time it estimates (torch, its ``main.py`` and ``footprint.py``), then
#: times the estimate alone; prints one JSON line.
DRIVER = """\
import json, sys, time
folder, world, per_node, argv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
start = time.monotonic()
try:
    import torch
    from benchkit.memory import estimate_entry, load_footprint, sibling_main
    sibling_main(load_footprint(folder).__file__)
except BaseException as err:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    print(json.dumps({"error": f"import: {type(err).__name__}: {first}"}))
    raise SystemExit(0)
imported = time.monotonic() - start
start = time.monotonic()
try:
    fp = estimate_entry(folder, argv, world, per_node)
except BaseException as err:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    print(json.dumps({"error": f"{type(err).__name__}: {first}"}))
    raise SystemExit(0)
print(json.dumps({"import_s": round(imported, 2), "estimate_s": round(time.monotonic() - start, 2),
                  "per_gpu": fp.per_gpu, "gpu": fp.gpu_line(), "torch": torch.__version__}))
"""


@dataclass(frozen=True)
class Job:
    """One entry's estimate: its benchmark folder, its options, its job's ranks."""

    name: str
    folder: str
    argv: list[str]
    world: int
    ranks_per_node: int


def lent_system() -> dict:
    """The system a first light resolves its suite for: one node, one H200."""
    return {
        "arch": "cuda",
        "gpu": {"count": 1, "capacity": f"{LENT_GPU_MIB} MiB"},
        "cpu": {"count": LENT_CPUS},
        "nodes": [{"name": "lent", "ip": "127.0.0.1", "main": True}],
    }


def jobs(config: Path, names: Iterable[str]) -> list[Job]:
    """The estimate of each of ``names`` (entries of ``config``) as the entry makes it on
    the lent machine: its options resolved for that machine (`lent_system`), one rank of
    one process per node (every first-light entry runs on its one GPU). An entry of no
    torch benchmark (no ``footprint.py``) is left out."""
    from milabench.config.argv import argv_list
    from milabench.config.loader import load_suite
    from milabench.config.placeholders import resolve_argv

    system = lent_system()
    suite = load_suite(config, system=dict(system), base="/tmp/milabench-first-light")
    out = []
    for name in names:
        entry = suite.all_entries.get(name)
        if entry is None or not (Path(entry.definition) / "footprint.py").is_file():
            continue
        argv = resolve_argv(argv_list(entry.argv), entry, system, device=0)
        folder = str(Path(entry.definition).resolve())
        out.append(Job(name, folder, [str(a) for a in argv], 1, 1))
    return out


def estimate(
    python: str,
    todo: list[Job],
    env: dict[str, str],
    wrap: Callable[[list[str]], list[str]] = lambda argv: argv,
) -> dict[str, dict]:
    """Entry name -> ``{"import_s", "estimate_s", "per_gpu", "gpu", "torch"}`` or
    ``{"error": one line}``: each job estimated by ``python`` in a process of its own,
    in the entry's folder (``env`` must put the repository and ``benchmarks/_shared`` on
    its path, as a run does), its argv passed through ``wrap`` (a namespace, say)."""
    results: dict[str, dict] = {}
    for job in todo:
        argv = wrap([python, "-W", "ignore", "-c", DRIVER, job.folder, str(job.world),
                     str(job.ranks_per_node), *job.argv])  # fmt: skip
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=job.folder, env=env, capture_output=True,
                                  text=True, timeout=TIMEOUT_S)  # fmt: skip
        except subprocess.TimeoutExpired:
            results[job.name] = {"error": f"no estimate within {TIMEOUT_S:g} s"}
            continue
        said = proc.stdout.strip().splitlines()
        tail = (proc.stderr.strip().splitlines() or [""])[-1].strip()
        try:
            result = json.loads(said[-1])
        except (IndexError, ValueError):
            result = {"error": f"exit {proc.returncode}: {tail or 'no output'}"}
        if "error" in result and tail and tail not in result["error"]:
            result["error"] += f" ({tail})"  # what argparse or a warning said
        result["wall_s"] = round(time.monotonic() - start, 1)
        results[job.name] = result
    return results


def lines(results: dict[str, dict]) -> list[str]:
    """One line per entry (GiB per GPU, marked when over the lent H200's memory, the
    estimate's seconds and the import's), then the total of the estimates' seconds:
    what the entries spend on them."""
    out, total = [], 0.0
    for name, r in results.items():
        if "error" in r:
            out.append(f"{name}: NO ESTIMATE: {r['error']}")
            continue
        total += r["estimate_s"]
        over = r["per_gpu"] > LENT_GPU_MIB * 2**20
        out.append(f"{name}: {r['per_gpu'] / 2**30:.1f} GiB per GPU"
                   f"{' (OVER THE H200: it warns or is skipped there)' if over else ''}, "
                   f"estimated in {r['estimate_s']:.1f} s (imports {r['import_s']:.1f} s)")  # fmt: skip
    out.append(f"estimates: {total:.1f} s in all, for {len(results)} entries")
    return out
