"""`milabench run` exits with the verdict its report prints (real processes, real CLI).

* a benchmark that reports a NaN loss and then asks to be stopped (`stop` event): the
  early stop does not excuse the NaN loss, the run exits non-zero and says "NaN loss";
* a run whose only entry is skipped for a capability measured nothing: it exits
  non-zero and says which entry was skipped and why;
* a selection that leaves nothing to run (no `.data` file is written at all) fails too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BENCHMARKS

VERDICT = re.compile(r"^Verdict: +(PASS|FAIL) \(exit code (\d+)\)$", re.M)

SUITE = """
_defaults:
  max_duration: 30
  weight: 1
  plan:
    method: per_gpu
  env:
    MILABENCH_TEST_MARK: "${{oc.env:MILABENCH_TEST_MARK,none}}"

nanstop:
  definition: {benchmarks}/nanstop

needs-nodes:
  definition: {benchmarks}/noop
  requires_capabilities:
    - "len(nodes) >= 2"

noop:
  definition: {benchmarks}/noop
"""


def run(tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(benchmarks=BENCHMARKS))
    env = dict(
        os.environ,
        MILABENCH_DASH="no",
        MILABENCH_RUN_EARLY_STOP_GRACE="0.5",  # nanstop does not leave: it is stopped
        MILABENCH_RUN_GRACE="1",
    )
    cmd = [sys.executable, "-m", "milabench", "run", "--config", str(suite), "--base",
           str(tmp_path), "--use-current-env", "--run-name", name, *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def verdict_of(proc: subprocess.CompletedProcess) -> tuple[str, int]:
    m = VERDICT.search(proc.stdout)
    assert m, proc.stdout + proc.stderr
    return m.group(1), int(m.group(2))


@pytest.mark.slow
def test_nan_loss_then_early_stop_fails_the_run(tmp_path: Path):
    proc = run(tmp_path, "nan", "--select", "nanstop")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert verdict_of(proc) == ("FAIL", 1)
    assert "NaN loss" in proc.stdout
    assert "nanstop: failed (NaN loss (then stopped early))" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_only_entry_skipped_for_a_capability_fails_and_says_why(tmp_path: Path):
    proc = run(tmp_path, "skip", "--select", "needs-nodes")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert verdict_of(proc) == ("FAIL", 1)
    why = proc.stdout[proc.stdout.index("Verdict:") :]
    assert "nothing was measured: every selected benchmark was skipped" in why
    assert "needs-nodes (skipped: capability (len(nodes) >= 2))" in why


def test_nothing_selected_fails_without_any_data_file(tmp_path: Path):
    proc = run(tmp_path, "empty", "--select", "noop", "--exclude", "noop")
    assert not list((tmp_path / "runs" / "empty").glob("*.data"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert verdict_of(proc) == ("FAIL", 1)
    assert "nothing was measured: no benchmark ran" in proc.stdout
