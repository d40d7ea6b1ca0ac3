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
import tempfile
from pathlib import Path

import pytest

from .test_standard_suite import EXTRA, UPSTREAM

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "config" / "standard-smoke.yaml"
# No FLOP count: RL environment steps.
NO_FLOPS = {"ppo", "dqn", "brax"}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("MILABENCH_CONFIG", "MILABENCH_SYSTEM", "MILABENCH_FAKE_GPUS", "MILABENCH_BASE"):
        env.pop(key, None)
    return env


def _argv(*args: str, base: Path) -> list[str]:
    return [sys.executable, "-m", "milabench", *args, "--config", str(SMOKE), "--base", str(base)]


def milabench(*args: str, base: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        _argv(*args, base=base),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=timeout,
    )


# The run is cut in two halves run at the same time, one per CPU: most of an entry's time
# here is its process's imports, on one core. `--select hf` and `--exclude hf` split the
# suite exactly (one install group, and everything else).
HALVES = {"hf": ("--select", "hf"), "rest": ("--exclude", "hf")}


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_standard_smoke_suite_passes_on_cpu(tmp_path):
    base = tmp_path / "base"
    for phase, limit in (("install", 900), ("prepare", 300)):
        done = milabench(phase, base=base, timeout=limit)
        assert done.returncode == 0, (phase, done.stdout[-3000:], done.stderr[-3000:])
    outcome: dict[str, tuple[int | None, str]] = {}
    with tempfile.TemporaryDirectory() as logs:
        procs: dict[str, subprocess.Popen] = {}
        try:
            for half, words in HALVES.items():
                argv = _argv("run", *words, "--run-name", f"smoke-{half}", base=base)
                with open(Path(logs) / f"{half}.out", "w") as out:
                    procs[half] = subprocess.Popen(
                        argv, stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT
                    )
            for proc in procs.values():
                proc.wait(timeout=1500)
        finally:
            for proc in procs.values():  # a half still running: its own SIGTERM clean-up
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            for half, proc in procs.items():
                outcome[half] = (proc.returncode, (Path(logs) / f"{half}.out").read_text())
    rows: dict[str, dict] = {}
    for half, (code, text) in outcome.items():
        assert code == 0, (half, text[-6000:])
        assert "Verdict:      PASS (exit code 0)" in text, (half, text[-3000:])
        report = json.loads((base / "runs" / f"smoke-{half}" / "report.json").read_text())
        names = {r["name"] for r in report["benchmarks"]}
        assert not names & set(rows), (half, names & set(rows))
        rows.update({r["name"]: r for r in report["benchmarks"]})
    enabled = {n for n, (_, on) in UPSTREAM.items() if on} | EXTRA
    assert set(rows) == enabled
    for name, row in rows.items():
        if name.endswith("-nodes"):
            assert row["reason"].startswith("skipped: capability"), (name, row)
            continue
        assert row["fail"] == 0 and row["n"] >= 1 and row["perf"], (name, row)
        if name not in NO_FLOPS:
            assert row["tflops"] and row["tflops"] > 0, name
