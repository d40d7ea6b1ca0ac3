"""`config/standard-smoke.yaml` end to end on this CPU machine: install, prepare and run
every entry of the GPU standard suite at tiny sizes (real environments, real processes,
torchrun with gloo; the session's shared run, smokerun.py), then the report: PASS, every
enabled single-node entry measured, the `-nodes` entries skipped for their capability
(one machine), TFLOPS for the entries that declare FLOPs. The benchmarks' own test files
check their entries' records in the same run."""

from __future__ import annotations

from .smokerun import SmokeRun
from .test_standard_suite import EXTRA, UPSTREAM

# No FLOP count: RL environment steps.
NO_FLOPS = {"ppo", "dqn", "brax"}


def test_standard_smoke_suite_passes_on_cpu(smoke: SmokeRun):
    assert smoke.returncode == 0, smoke.stdout[-5000:] + smoke.stderr[-3000:]
    assert "Verdict:      PASS (exit code 0)" in smoke.stdout
    report = smoke.report()
    assert report["verdict"] == "PASS" and report["exit_code"] == 0
    rows = smoke.rows()
    enabled = {n for n, (_, on) in UPSTREAM.items() if on} | EXTRA
    assert set(rows) == enabled
    for name, row in rows.items():
        if name.endswith("-nodes"):
            assert row["reason"].startswith("skipped: capability"), (name, row)
            continue
        assert row["fail"] == 0 and row["n"] >= 1 and row["perf"], (name, row)
        if name not in NO_FLOPS:
            assert row["tflops"] and row["tflops"] > 0, name
