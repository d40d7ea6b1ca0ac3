"""PPO (brax hopper) and DQN (gymnax CartPole) of benchmarks/purejaxrl at tiny sizes on
CPU, with the `jax` install group's own environment (JAX is not in the test
environment): `milabench install --select ppo,dqn` once for the module, then each main.py
run by that environment's python; records checked (steps/s, finite losses, stop)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BENCHMARKS, bench_env, run_with_pipe
from .test_mains import check_budget

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def jax_python(tmp_path_factory) -> str:
    base = tmp_path_factory.mktemp("jaxbase")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    done = subprocess.run(
        [sys.executable, "-m", "milabench", "install", "--config",
         str(ROOT / "config" / "standard-smoke.yaml"), "--base", str(base), "--select", "ppo,dqn"],
        capture_output=True, text=True, timeout=900, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return str(base / "venv" / "jax" / "bin" / "python")


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        # brax's `fast` environment: the PPO code is ours and the same on every brax
        # environment; compiling hopper's physics would cost a CPU a minute (measured by
        # hand instead, docs/benchmarks.md).
        ["ppo", "--env-name", "fast", "--num-envs", "16", "--num-steps", "4",
         "--num-minibatches", "2", "--update-epochs", "1", "--hidden", "16"],
        ["dqn", "--num-envs", "16", "--buffer-size", "1024", "--buffer-batch-size", "128"],
    ],
    ids=["ppo", "dqn"],
)  # fmt: skip
def test_runs_and_reports_environment_steps(argv, jax_python):
    run = run_with_pipe([jax_python, "main.py", *argv, "--device", "cpu"],
                        bench_env(stop=3, skip=1), BENCHMARKS / "purejaxrl", timeout=300)  # fmt: skip
    check_budget(run, 3, "steps/s", loss=False)
    assert run.losses() and all(math.isfinite(x) for x in run.losses())
    assert not [r for r in run.records if "flops_per_item" in r]  # no FLOP count declared
    assert "1 cpu device(s)" in run.stdout
