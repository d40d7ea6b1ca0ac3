"""scripts/perf_thirdparty.py: one quick round on the sine example, end to end.

Only the shape of the results is checked: CPU timing is too noisy to assert on the
overhead itself.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_round_on_sine(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "perf_thirdparty.py")]
        + ["--quick", "--rounds", "1", "--scripts", "sine", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sine" in proc.stdout and "load average" in proc.stdout
    results = json.loads(out.read_text())
    assert list(results["scripts"]) == ["sine"]
    sine = results["scripts"]["sine"]
    for way in ("cpu", "wall"):
        for key in ("bare_work_s", "instrumented_work_s", "bare_startup_s",
                    "instrumented_startup_s"):  # fmt: skip
            assert math.isfinite(sine[way][key]), (way, key)
        # a percentage of no work is undefined: --quick work can drown in start-up noise
        # on a loaded machine (full minus near-zero run <= 0), and the harness says NaN
        for key in ("overhead_pct", "overhead_pct_min", "overhead_pct_max"):
            value = sine[way][key]
            assert math.isfinite(value) or min(sine[way]["bare_work_all"]) <= 0, (way, key)
    accounted = sine["accounted"]
    for key in ("fraction_pct", "per_step_us", "step_ms", "steps"):
        assert math.isfinite(accounted[key]), key
    assert accounted["steps"] > 0 and accounted["fraction_pct"] >= 0
    assert len(results["loadavg_before"]) == 3 and len(results["loadavg_after"]) == 3
