"""The performance harness runs end to end (figures are not asserted: it measures)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "perf_overhead.py"


@pytest.mark.slow
def test_harness_smoke_run():
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--json",
            "--only",
            "a,b,c,d",
            "--steps",
            "300",
            "--rounds",
            "1",
            "--lines",
            "20000",
            "--quick",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    results = json.loads(out)
    ingestion = results["ingestion"]
    assert ingestion["received"] == ingestion["lines"] == 20000 and ingestion["lost"] == 0
    assert ingestion["lines_per_s"] > 1000  # sanity only
    step = results["step_cost"]
    assert 0 < step["timed_loop_us"] < 100  # sanity only; the target (5 us) is in the docs
    assert results["launch"]["runner_noop_s"] > 0
    overhead = results["overhead"]
    assert overhead["bare_items_per_s"] > 0 and overhead["instrumented_items_per_s"] > 0
