"""scripts/process_costs.py: a real command's processes read from /proc, their CPU counted
by kind, the command's exit status passed through (Linux: /proc)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

# the platform, not /proc itself: nothing Linux-only is touched while collecting
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "process_costs.py"
_spec = importlib.util.spec_from_file_location("process_costs", SCRIPT)
costs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(costs)

# A "benchmark" that spins 0.6 s of CPU in a child it waits for, then exits 3.
SPIN = """
import subprocess, sys, time
if sys.argv[1:] == ["child"]:
    end = time.process_time() + 0.6
    while time.process_time() < end:
        pass
    sys.exit(0)
subprocess.run([sys.executable, __file__, "child"], check=True)
sys.exit(3)
"""


def test_kinds_are_read_from_the_command_line():
    python = "/venv/bin/python"
    cases = {
        f"{python} /repo/benchmarks/llm/main.py --size tiny": "benchmark llm/main",
        f"{python} -I -c import importlib, json, sys\nfailed, versions = [], {{}}": (
            "milabench install: import check"
        ),
        f"{python} -m milabench run --config x.yaml": "milabench run",
        "/venv/bin/milabench install --config x.yaml": "milabench install",
        f"{python} -u -c import sys;exec(eval(sys.stdin.readline()))": "pytest-xdist worker",
        f"{python} -m uv pip install x": "uv",
        f"{python} /venv/bin/torchrun --nproc-per-node=2 main.py": "torchrun",
        f"{python} -W ignore tests/benchmarks/estimate_folders.py /repo": (
            "python estimate_folders.py"
        ),
        "/usr/lib/chromium/chromium --headless": "chromium",
    }
    for cmdline, expected in cases.items():
        comm = "chromium" if "chromium" in cmdline else "python3.11"
        assert costs.kind(comm, cmdline) == expected, cmdline
    assert costs.kind("python3", f"{python} main.py --help", "/repo/benchmarks/bert") == (
        "benchmark bert/main"
    )


def test_a_commands_processes_are_counted_and_its_status_returned(tmp_path):
    main = tmp_path / "benchmarks" / "spin" / "main.py"
    main.parent.mkdir(parents=True)
    main.write_text(SPIN)
    out = tmp_path / "seen.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--interval", "0.05", "--json", str(out), "--",
         sys.executable, str(main)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    rows = {line.split(None, 2)[2]: float(line.split()[0])
            for line in done.stdout.splitlines()[1:-1]}  # fmt: skip
    assert rows["benchmark spin/main"] >= 0.4, done.stdout  # the child's 0.6 s, sampled
    assert done.stdout.splitlines()[-1].startswith("sampled processes: ")
    seen = json.loads(out.read_text())
    assert sum(1 for r in seen if str(main) in r["cmdline"]) == 2  # the parent and its child


def test_no_command_is_a_usage_error():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 2 and "no command given" in done.stderr
