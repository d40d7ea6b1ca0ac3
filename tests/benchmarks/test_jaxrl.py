"""benchmarks/purejaxrl (the `ppo`, `dqn` and `brax` entries) with the `jax` install
group's own environment (JAX is not in the test environment): the one the session's smoke
run installed (smokerun.py), whose python runs main.py.

* The standard suite's command lines, resolved by `milabench matrix` and run with
  `--dry-run`: the workload each builds is upstream milabench's (docs/parity.md), pinned
  here number by number.
* Each algorithm at tiny sizes on CPU, read from the session's smoke run (its `ppo`, `dqn`
  and `brax` entries): records checked (rate and its unit, finite losses, stop).
* A device JAX cannot see: one line, never a CPU run."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import BENCHMARKS, bench_env, run_with_pipe
from .smokerun import SmokeRun
from .test_suites import matrix


@pytest.fixture(scope="module")
def jax_python(smoke: SmokeRun) -> str:
    """The python of the jax group the session's smoke run installed (smokerun.py: the
    real ``milabench install`` of config/standard-smoke.yaml, jax group included)."""
    python = smoke.base / "venv" / "jax" / "bin" / "python"
    assert python.is_file(), f"the smoke run installed no jax group: {python}"
    return str(python)


def described(stdout: str) -> dict:
    """The workload main.py prints at start (``purejaxrl: {...}``)."""
    lines = [line for line in stdout.splitlines() if line.startswith("purejaxrl: {")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0].removeprefix("purejaxrl: "))


# What upstream milabench runs under these names (commit faf39234; docs/parity.md).
# benchmarks/purejaxrl/ppo.py (ActorCritic, make_train, Arguments) + wrappers.py
# (BraxGymnaxWrapper) + config/training.yaml `ppo`:
UPSTREAM_PPO = {
    "env": "hopper",
    "backend": "positional",
    "episode_length": 1000,
    "actor": [11, 256, 256, 3],  # hopper: 11 observations, 3 actions
    "critic": [11, 256, 256, 1],
    "activation": "tanh",
    "normalize": True,
    "adam_eps": 1e-5,
    "lr": 3e-4,
    "max_grad_norm": 0.5,
    "num_envs": 128,
    "num_steps": 10,
    "minibatch": 40,  # 1280 transitions in 32 minibatches
    "update_epochs": 4,
    "env_steps_per_iteration": 1280,
    "count_every": 10,  # its StepTimer counts one update's steps every 10 updates
}
# benchmarks/purejaxrl/dqn.py (QNetwork, make_train, Arguments; flashbax's flat buffer)
# + config/training.yaml `dqn`:
UPSTREAM_DQN = {
    "env": "SpaceInvaders-MinAtar",
    "observation": [600, "float32"],  # 10 x 10 x 6, flattened (gymnax 0.0.9 and 1.x)
    "q_network": [600, 120, 84, 4],  # the minimal action set: no-op, left, right, fire
    "loss": "squared error",
    "lr": 2.5e-4,
    "epsilon": [1.0, 0.05, 250000],
    "num_envs": 128,
    "buffer": [128, 1024],  # 131072 transitions
    "buffer_batch_size": 65536,
    "iterations_per_update": 5,  # step count (128 per iteration) a multiple of 10
    "learning_starts": 10000,
    "min_buffer": 65664,  # flashbax: (65536 // 128 + 1) slots of 128
    "target_every": 500,
    "env_steps_per_iteration": 640,
}
# benchmarks/brax/main.py (its train() call and argument defaults) + config/training.yaml
# `brax`; networks and the rest at brax's defaults (brax 0.14.2 on both sides):
UPSTREAM_BRAX = {
    "env": "ant",
    "backend": "generalized",
    "trainer": "brax.training.agents.ppo.train.train",
    "train": {
        "num_timesteps": 100_000_000,
        "discounting": 0.97,
        "learning_rate": 3e-4,
        "entropy_cost": 0.01,
        "normalize_observations": True,
        "action_repeat": 1,
        "num_evals": 500,
        "reward_scaling": 0.1,
        "episode_length": 20,
        "unroll_length": 5,
        "num_minibatches": 32,
        "num_envs": 8192,
        "batch_size": 1024,
        "seed": 0,
    },
    "policy_hidden": [32, 32, 32, 32],
    "value_hidden": [256, 256, 256, 256, 256],
    "activation": "silu",  # linen.swish
    "num_updates_per_batch": 2,
    "env_steps_per_training_step": 163840,
    "training_steps_per_epoch": 2,
    "env_steps_per_epoch": 327680,
}


@pytest.mark.slow
def test_standard_entries_build_upstreams_workloads(jax_python):
    """config/standard.yaml's command lines (as `milabench matrix` resolves them on a
    fake CUDA node), run with ``--device cpu --dry-run``: nothing is compiled or run; the
    printed workload must be upstream's, number by number."""
    entries = matrix("standard.yaml", "--select", "ppo,dqn,brax",
                     MILABENCH_FAKE_GPUS="cuda:8:81920")  # fmt: skip
    expected = {"ppo": UPSTREAM_PPO, "dqn": UPSTREAM_DQN, "brax": UPSTREAM_BRAX}
    for name, upstream in expected.items():
        entry = entries[name]
        assert entry["parity"] == "same", name
        command = (entry.get("processes") or [entry])[0]["command"]
        assert Path(command[1]).name == "main.py", command
        run = run_with_pipe([jax_python, "main.py", *command[2:], "--device", "cpu", "--dry-run"],
                            bench_env(), BENCHMARKS / "purejaxrl", timeout=300)  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        got = described(run.stdout)
        assert got["algo"] == name
        assert {k: got[k] for k in upstream} == upstream, name
        assert not run.records  # a dry run measures nothing


# brax's `fast` environment in the smoke (config/standard-smoke.yaml): the PPO code and
# brax's trainer are the same on every brax environment; compiling hopper's or ant's
# physics would cost a CPU a minute (measured by hand instead, docs/benchmarks.md).
@pytest.mark.parametrize(
    "entry, units",
    [("ppo", "items/s"), ("dqn", "steps/s"), ("brax", "steps/s")],
    ids=["ppo", "dqn", "brax"],
)
def test_runs_and_reports_environment_steps(entry, units, smoke: SmokeRun):
    """Reads the session's smoke run (entry ``ppo`` / ``dqn`` / ``brax``, run by the jax
    group's python on CPU)."""
    command = smoke.command(entry)
    assert command[1].endswith("benchmarks/purejaxrl/main.py") and command[2] == entry
    assert smoke.option(entry, "--device") == "cpu"
    smoke.check_measured(entry, units, loss=False)
    losses = smoke.losses(entry)
    assert losses and all(math.isfinite(x) for x in losses)
    assert not smoke.declared_flops(entry)  # no FLOP count declared
    stdout = smoke.stdout_of(entry)
    assert "1 cpu device(s)" in stdout
    got = described(stdout)
    assert got["algo"] == entry
    if entry == "ppo":  # the network and the counting asked for
        hidden = int(smoke.option(entry, "--hidden"))
        assert got["actor"][1:3] == [hidden, hidden]
        assert got["count_every"] == int(smoke.option(entry, "--count-every")) == 10
    elif entry == "dqn":  # 32 envs: the step count is a multiple of 10 every 5 iterations
        assert got["env"] == "SpaceInvaders-MinAtar" and got["iterations_per_update"] == 5
    else:  # 160 environment steps per training step; the budget makes an epoch one of them
        assert got["training_steps_per_epoch"] == 1 and got["env_steps_per_epoch"] == 160


@pytest.mark.slow
@pytest.mark.parametrize(
    ("device", "why"),
    [
        ("cuda", r"no GPU plugin is installed \(JAX runs on cpu\); install jax\[cuda12\] .*"),
        ("xpu", r"JAX has no back-end for xpu .*"),
    ],
)
def test_a_device_jax_cannot_see_is_one_line_never_a_cpu_run(device, why, jax_python):
    """The jax group here is CPU-only (no CUDA plugin): asked for cuda, the benchmark
    must not measure the CPU under a GPU's name (JAX's own fallback), but exit."""
    version = subprocess.run([jax_python, "-c", "import jax; print(jax.__version__)"],
                             capture_output=True, text=True, timeout=120).stdout.strip()  # fmt: skip
    env = bench_env(stop=3, skip=1)
    env.pop("JAX_PLATFORMS", None)
    proc = subprocess.run([jax_python, "main.py", "dqn", "--num-envs", "16", "--device", device],
                          capture_output=True, text=True, env=env, timeout=300,
                          cwd=BENCHMARKS / "purejaxrl")  # fmt: skip
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0
    assert len(lines) == 1, proc.stderr
    assert re.fullmatch(rf"jax {re.escape(version)} cannot see device {device}: {why}",
                        lines[0]), lines[0]  # fmt: skip
    assert "purejaxrl:" not in proc.stdout  # it never started (no workload line)
