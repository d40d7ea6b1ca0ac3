"""scripts/perf_exit.py runs its comparison end to end (figures are not asserted: it
measures; docs/performance.md holds them)."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "perf_exit.py"


def test_one_round_prints_both_endings():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--stacks", "torch"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\| torch \| [\d.]+ s \| [\d.]+ s \| -?[\d.]+ s \|$", done.stdout, re.M)
