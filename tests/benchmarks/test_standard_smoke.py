"""`config/standard-smoke.yaml` end to end on this CPU machine: install, prepare and run
every entry of the GPU standard suite at tiny sizes (real environments, real processes,
torchrun with gloo), then the report: PASS, every enabled single-node entry measured,
the `-nodes` entries skipped for their capability (one machine), TFLOPS for the entries
that declare FLOPs. The slowest test of the suite (a few minutes; installs come from
uv's cache after the first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_standard_suite import EXTRA, UPSTREAM

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "config" / "standard-smoke.yaml"
# No FLOP count: RL environment steps.
NO_FLOPS = {"ppo", "dqn", "brax"}


def milabench(*args: str, base: Path, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for key in ("MILABENCH_CONFIG", "MILABENCH_SYSTEM", "MILABENCH_FAKE_GPUS", "MILABENCH_BASE"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args, "--config", str(SMOKE), "--base", str(base)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_standard_smoke_suite_passes_on_cpu(tmp_path):
    base = tmp_path / "base"
    for phase, limit in (("install", 900), ("prepare", 300)):
        done = milabench(phase, base=base, timeout=limit)
        assert done.returncode == 0, (phase, done.stdout[-3000:], done.stderr[-3000:])
    run = milabench("run", "--run-name", "smoke", base=base, timeout=1500)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
    assert "Verdict:      PASS (exit code 0)" in run.stdout
    report = json.loads((base / "runs" / "smoke" / "report.json").read_text())
    rows = {r["name"]: r for r in report["benchmarks"]}
    enabled = {n for n, (_, on) in UPSTREAM.items() if on} | EXTRA
    assert set(rows) == enabled
    for name, row in rows.items():
        if name.endswith("-nodes"):
            assert row["reason"].startswith("skipped: capability"), (name, row)
            continue
        assert row["fail"] == 0 and row["n"] >= 1 and row["perf"], (name, row)
        if name not in NO_FLOPS:
            assert row["tflops"] and row["tflops"] > 0, name
