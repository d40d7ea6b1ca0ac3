"""A probe selector that matches nothing fails the run with a line naming the selector.

voir reports a selector it cannot install as an ``overseer_error`` and carries on, and a
probe on a function the script never calls simply never fires: both used to give a PASS
with nothing (or only part of what was asked) measured. Real `milabench run`, real voir.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from concurrency import STOP_GRACE

from .conftest import BENCHMARKS

SUITE = """
_defaults:
  weight: 1
  plan:
    method: per_gpu
  definition: {benchmarks}/probed
  measure: {{warmup_min: 0.1s, warmup_max: 0.5s, min: 0.5s, max: 1s, min_observations: 3,
             startup: 60s}}
  voir:
    options: {{gpu_poll: 0}}

right:
  env: {{}}

wrong-variable:
  env:
    PROBE_LOADER: "//main > loadr"

never-called:
  env:
    PROBE_LOSS: "//evaluate > loss"
"""


def run(tmp_path: Path, *select: str) -> subprocess.CompletedProcess:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(benchmarks=BENCHMARKS))
    env = dict(os.environ, MILABENCH_DASH="no", MILABENCH_RUN_EARLY_STOP_GRACE=STOP_GRACE)
    cmd = [sys.executable, "-m", "milabench", "run", "--config", str(suite), "--base",
           str(tmp_path), "--use-current-env", "--select", ",".join(select)]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)


@pytest.mark.slow
def test_right_selectors_pass(tmp_path: Path):
    proc = run(tmp_path, "right")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"^Verdict: +PASS \(exit code 0\)$", proc.stdout, re.M)


@pytest.mark.slow
def test_wrong_selectors_fail_naming_the_selector(tmp_path: Path):
    proc = run(tmp_path, "wrong-variable", "never-called")
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    assert re.search(r"^Verdict: +FAIL \(exit code 1\)$", out, re.M)
    # a variable that does not exist: named before the script runs (not run unmeasured)
    assert "Cannot find a variable named `loadr`" in out
    assert "probe `//main > loadr` cannot be installed" in out
    # a function the script never calls: nothing raises, the probe is named
    assert "never-called: error event in never-called.D0: ProbeNeverFired: probe " in out
    assert "probe `//evaluate > loss` never fired" in out
    assert "wrong-variable" in out and "never-called" in out
