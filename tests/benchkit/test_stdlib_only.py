"""benchkit works in an environment that has only the standard library."""

import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import benchkit

ROOT = Path(__file__).resolve().parents[2]

_CODE = textwrap.dedent(
    """
    import sys, time
    import benchkit, benchkit.channel, benchkit.options, benchkit.timing, benchkit.monitors
    import benchkit.accelerators, benchkit.smi
    import benchkit.stopping
    assert "torch" not in sys.modules and "psutil" not in sys.modules
    from benchkit.monitors import Monitor
    from benchkit.timing import TimedIterator
    it = TimedIterator(
        [[1, 2, 3]] * 10, stop=5, skip=1, interval=3600,
        measure={"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0}, monitor=True,
    )
    it.gpu_poll = 0.01
    for _ in it:
        time.sleep(0.01)
    print(Monitor(it.writer).backends["host"], it.done)
    """
)


def test_import_and_measure_without_site_packages():
    env = dict(os.environ, PYTHONPATH=str(ROOT), MILABENCH_DATA_STDOUT="1")
    env.pop("DATA_FD", None)
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _CODE],  # -S: no site-packages (no torch, no psutil)
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "ProcSampler True"  # the /proc fallback of the monitor
    records = [json.loads(x) for x in lines[:-1]]
    assert len([r for r in records if "rate" in r]) == 5
    assert any("cpudata" in r for r in records) and any("process" in r for r in records)


def test_every_module_imports_only_the_standard_library():
    """Each benchkit module imports in a bare interpreter, and what it imports is benchkit
    or the standard library: no third-party package, and not benchshared (the benchmarks'
    model and data code depends on benchkit, never the reverse)."""
    names = sorted(f"benchkit.{m.name}" for m in pkgutil.iter_modules(benchkit.__path__))
    assert "benchkit.timing" in names and "benchkit.vision" not in names
    code = textwrap.dedent(
        """
        import importlib, json, sys
        for name in sys.argv[1:]:
            importlib.import_module(name)
        top = {m.split(".")[0] for m in sys.modules}
        print(json.dumps(sorted(top - set(sys.stdlib_module_names) - {"benchkit", "__main__"})))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code, *names],  # -S: no site-packages at all
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def _benchkit_imports(path: Path) -> set[str]:
    """The benchkit modules ``path`` imports, at the top or inside functions."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchkit"):
            parts = node.module.split(".")
            found |= {a.name for a in node.names} if len(parts) == 1 else {parts[1]}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("benchkit.")}
    return found - {path.stem}


def test_no_import_cycle_between_benchkit_modules():
    graph = {p.stem: _benchkit_imports(p) for p in (ROOT / "benchkit").glob("*.py")}
    assert graph["smi"] == set() and graph["accelerators"] == {"smi"}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for other in sorted(graph.get(module, ())):
            visit(other, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
