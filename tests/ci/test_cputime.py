"""The optional CPU log of the tests (tests/cputime.py), in a real nested pytest: one
line per test, with the CPU of the test process and of the children it waited for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CASES = """
import subprocess, sys, time

def test_idle():
    time.sleep(0.3)

def test_busy_child():
    code = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.5: pass"
    subprocess.run([sys.executable, "-c", code], check=True)
"""


def test_each_test_gets_a_line_with_its_own_and_its_childrens_cpu(tmp_path: Path):
    (tmp_path / "test_cases.py").write_text(CASES)
    log = tmp_path / "cpu"
    env = dict(os.environ, MILABENCH_TEST_CPU_LOG=str(log), PYTHONPATH=str(TESTS))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "cputime", "-p", "no:cacheprovider",
         "-o", "addopts=", str(tmp_path / "test_cases.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = log.glob("*.jsonl")
    lines = {json.loads(line)["id"].split("::")[1]: json.loads(line)
             for line in path.read_text().splitlines()}  # fmt: skip
    assert set(lines) == {"test_idle", "test_busy_child"}
    idle, busy = lines["test_idle"], lines["test_busy_child"]
    assert idle["wall"] >= 0.3 and idle["children"] < 0.1 and idle["self"] < 0.2
    assert busy["children"] >= 0.5 and busy["start"] > idle["start"]
