"""The CPU environments hold what their benchmarks import, and say nothing about it.

The default CPU suite's environments are installed from the committed pins (real
installs from this machine's pip sources); then, in each benchmark's environment and with
warnings turned into errors, every module its files import is imported: a package that
the pins leave out fails here by name, and so does torch's ``UserWarning: Failed to
initialize NumPy``, which it prints at start-up when numpy is missing. Last, the suite is
prepared and run in those environments: it passes, every benchmark measures, and no
benchmark's stderr says a module is missing.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from clirun import milabench
from systemtools import MACHINE_PREFIX

from milabench.envs.pipconf import read_pip_settings
from milabench.events import read_events

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "config" / "cpu-fast.yaml"  # cpu.yaml's entries, with tiny windows
CPU = {"MILABENCH_GPU_ARCH": "cpu"}
BENCHMARKS = {
    "flops-fp32", "flops-bf16", "convnet", "convnet-noio", "transformer-lm", "bert",
    "opbench-matmul", "opbench-softmax", "ddp", "thirdparty",
}  # fmt: skip
MISSING = re.compile(r"No module named|Failed to initialize NumPy|ModuleNotFoundError")

# Run in an environment with -W error, for each benchmark folder on the command line that
# runs in it: the modules the folder's files import (absolute imports anywhere in a file,
# except inside a `try` that handles ImportError: optional ones), without the standard
# library and the folder's own modules, each imported; one JSON line {folder: {module:
# error or null}}. One process per environment: a warning a module prints when first
# imported still fails it (-W error), and torch starts once per environment, not once per
# folder. benchfile.py runs in milabench itself.
PROBE = r"""
import ast, importlib, json, sys
from pathlib import Path

OPTIONAL = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}

def optional(parents):
    for node in parents:
        for handler in getattr(node, "handlers", []):
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            if handler.type is None or {getattr(k, "id", "") for k in kinds} & OPTIONAL:
                return True
    return False

def imports(path):
    found = set()
    def walk(node, parents):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import) and not optional(parents):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and not optional(parents):
                found.add(child.module)
            walk(child, [*parents, child])
    walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), [])
    return found

def probe(folder):
    local = {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.glob("*/__init__.py")}
    skip = set(sys.stdlib_module_names) | local | {"__future__"}
    names = {n for f in folder.glob("*.py") if f.name != "benchfile.py" for n in imports(f)}
    result = {}
    for name in sorted(n for n in names if n.split(".")[0] not in skip):
        try:
            importlib.import_module(name)
            result[name] = None
        except BaseException as exc:
            result[name] = f"{type(exc).__name__}: {exc}"
    return result

print(json.dumps({folder: probe(Path(folder)) for folder in sys.argv[1:]}))
"""


def local_torch_wheel() -> bool:
    for link in read_pip_settings().find_links:
        if Path(link).is_dir() and any(Path(link).glob("torch-2.13.0+cpu-*.whl")):
            return True
    return False


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    if not local_torch_wheel():
        pytest.skip(MACHINE_PREFIX + "no torch 2.13.0+cpu wheel in pip's find-links")
    base = tmp_path_factory.mktemp("cpuenvs")
    proc = milabench("install", "--config", str(SUITE), "--base", str(base), env=CPU,
                     timeout=1200)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return base


def suite_folders(base: Path) -> dict[Path, Path]:
    """Each benchmark folder of the suite -> the environment it runs in."""
    proc = milabench("resolve", "--config", str(SUITE), "--base", str(base), "--format",
                     "json", env=CPU)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    entries = json.loads(proc.stdout).values()
    return {Path(e["definition"]): Path(e["dirs"]["venv"]) for e in entries}


def test_every_benchmark_imports_what_it_needs_without_a_warning(installed: Path):
    folders = suite_folders(installed)
    assert len(folders) >= 6 and {venv.name for venv in folders.values()} == {"torch", "hf"}
    failures = {}
    for venv in sorted(set(folders.values())):
        mine = sorted(str(folder) for folder, used in folders.items() if used == venv)
        proc = subprocess.run(
            [str(venv / "bin" / "python"), "-W", "error", "-c", PROBE, *mine],
            capture_output=True, text=True, timeout=300, cwd=venv,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        by_folder = json.loads(proc.stdout.splitlines()[-1])
        assert sorted(by_folder) == mine, (venv.name, sorted(by_folder))
        for folder, found in by_folder.items():
            name = Path(folder).name
            assert "torch" in found, (name, found)  # every one of them uses torch
            failures.update({f"{name}: {m}": e for m, e in found.items() if e})
    assert not failures, failures


def test_the_suite_runs_passes_and_no_benchmark_says_a_module_is_missing(installed: Path):
    """README command 1's suite with its tiny windows, in the environments install made:
    prepare and run pass, every benchmark measured a rate, no stderr names a missing
    module."""
    prep = milabench("prepare", "--config", str(SUITE), "--base", str(installed), env=CPU,
                     timeout=600)  # fmt: skip
    assert prep.returncode == 0, prep.stdout[-3000:] + prep.stderr[-3000:]
    assert any((installed / "data" / "convnet-jpeg").glob("*/*.jpeg"))
    run = milabench("run", "--config", str(SUITE), "--base", str(installed), "--run-name",
                    "envs", "--dash", "no", env=CPU, timeout=1200)  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "PASS" in run.stdout
    folder = installed / "runs" / "envs"
    rates: dict[str, int] = {}
    for data in folder.glob("*.data"):
        rates.setdefault(data.name.split(".")[0], 0)
        for event in read_events(data):
            if event["event"] == "data" and event["data"].get("task") == "train":
                if "rate" in event["data"]:
                    assert event["data"]["rate"] > 0, data.name
                    rates[data.name.split(".")[0]] += 1
    # at least one rate each: min_observations (3 in cpu-fast.yaml) is a warning, and a
    # loaded machine fits fewer steps of bert in the same 2 s window
    assert set(rates) == BENCHMARKS and all(rates.values()), rates
    stderrs = sorted(folder.glob("*.stderr"))  # a quiet benchmark has no .stderr file
    said = {
        path.name: line
        for path in stderrs
        for line in path.read_text(errors="replace").splitlines()
        if MISSING.search(line)
    }
    assert not said, said
