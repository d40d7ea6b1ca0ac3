"""scripts/startup_times.py, the harness behind docs/benchmarks.md's start-up figures:
its JAX probes run the standard suite's own arguments, its table says how each figure was
obtained, and a wrong probe name is a usage error. (The probes themselves build
multi-gigabyte models: they are run by hand, not here.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from scriptmodule import load_script, unload

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def harness():
    yield load_script("startup_times")
    unload("startup_times")


def test_jax_probes_run_the_suites_arguments(harness, monkeypatch):
    from milabench.config import load_suite

    monkeypatch.setenv("MILABENCH_GPU_ARCH", "cpu")
    commands = harness.jax_commands(threads=3)
    assert set(commands) == set(harness.JAX_ENTRIES)
    suite = load_suite(ROOT / "config" / "standard.yaml", select=list(harness.JAX_ENTRIES))
    for name, argv in commands.items():
        assert argv[argv.index("--device") + 1] == "cpu", name
        for key, value in suite.entries[name].argv.items():
            if key.startswith("--") and value not in (None, True) and "{" not in str(value):
                assert argv[argv.index(key) + 1] == str(value), (name, key)
    assert not any("{" in arg for argv in commands.values() for arg in argv)  # resolved
    assert commands["ppo"][commands["ppo"].index("--threads") + 1] == "3"


def test_table_says_how_each_figure_was_obtained(harness):
    part = {"per_layer": {"build_s": 6.0, "bf16_s": 0.5}, "embeddings_from": "measured",
            "embeddings": {"build_s": 14.0, "bf16_s": 1.0}}  # fmt: skip
    llm = {
        "probe": "llm-70b",
        "params": 70.6e9,
        "fp32_gib": 263.0,
        "layers": 80,
        "fp32": part,
        "bf16": part,
        "shard_of_8_bf16_s": 61.8,
        "imports_s": 9.0,
    }
    what, how = harness.describe(llm)
    assert "70.6B parameters (263 GiB fp32)" in what and "per layer 6.00 s build" in what
    assert "a shard of 8 in host memory 62 s" in what
    assert how == "extrapolated to 80 layers"
    jax = {"probe": "jax-ppo", "argv": ["ppo", "--env-name", "hopper"], "returncode": 1,
           "error": "boom", "total_s": 3.0}  # fmt: skip
    what, how = harness.describe(jax)
    assert what.endswith("(exit 1: boom)") and how.startswith("full size")


def test_unknown_probe_is_a_usage_error(harness, capsys):
    with pytest.raises(SystemExit) as info:
        harness.main(["--probes", "llm-7b"])
    assert info.value.code == 2
    assert "unknown probe 'llm-7b'" in capsys.readouterr().err
