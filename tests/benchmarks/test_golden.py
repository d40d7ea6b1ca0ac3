"""Golden outputs: `flops` and `opbench` check the operation they time.

Before timing, each runs its operation once on fixed inputs in its dtype and compares
with float64 on the CPU (`benchkit.golden`), writing `{"task": "golden", "golden": {...}}`
records. Real runs of the benchmark mains (a real data pipe), then a real `milabench
run` where the hidden test flag `--golden-perturb` makes the check fail for real.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from concurrency import STOP_GRACE

from benchkit import golden

from .conftest import BENCHMARKS, bench_env, run_with_pipe


def goldens(run) -> list[dict]:
    records = [r for r in run.records if r.get("task") == "golden"]
    assert all(set(r) == {"task", "golden", "time"} for r in records), records
    return [r["golden"] for r in records]


def run_flops(python: str, dtype: str, *extra: str):
    argv = [python, "main.py", "--dtype", dtype, "--size", "128", "--step-ms", "5"]
    run = run_with_pipe([*argv, "--device", "cpu", *extra], bench_env(2, 1), BENCHMARKS / "flops")
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(run.rates()) == 2  # the timed loop still runs and reports
    return run


def run_opbench(python: str, op: str, *extra: str):
    argv = [python, "main.py", "--op", op, "--shapes", "small", "--case-ms", "0.3"]
    run = run_with_pipe([*argv, "--device", "cpu", *extra], bench_env(2, 1), BENCHMARKS / "opbench")
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(run.rates()) == 2
    return run


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_flops_golden_passes_with_a_tiny_error(dtype, python):
    run = run_flops(python, dtype)
    [check] = goldens(run)
    assert check == {
        "name": "matmul",
        "dtype": dtype,
        "max_rel_error": check["max_rel_error"],
        "tolerance": golden.TOLERANCES[dtype],
        "passed": True,
        "reference": "float64 on cpu",
    }
    # Well inside the tolerance (fp32: ~3e-7 of 1e-5; bf16: ~2e-3 of 5e-2), not zero.
    assert 0 < check["max_rel_error"] < golden.TOLERANCES[dtype] / 4
    assert f"golden matmul {dtype}: ok" in run.stdout
    # Written before the timed loop: before the first rate record.
    first_rate = next(i for i, r in enumerate(run.records) if "rate" in r)
    assert next(i for i, r in enumerate(run.records) if r.get("task") == "golden") < first_rate


@pytest.mark.parametrize("dtype, eps", [("fp32", 0.05), ("bf16", 0.2)])
def test_flops_golden_perturbed_fails_with_the_error_size(dtype, eps, python):
    run = run_flops(python, dtype, "--golden-perturb", str(eps))
    [check] = goldens(run)
    assert check["passed"] is False
    # The perturbation adds eps; the bench's own error moves it by at most its tolerance.
    assert check["max_rel_error"] == pytest.approx(eps, abs=golden.TOLERANCES[dtype])
    assert f"golden matmul {dtype}: FAILED (max relative error" in run.stdout


def test_flops_golden_off_and_flag_hidden(python):
    assert goldens(run_flops(python, "fp32", "--golden", "off")) == []
    proc = subprocess.run([python, "main.py", "--help"], cwd=BENCHMARKS / "flops",
                          env=bench_env(), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "--golden {on,off}" in proc.stdout and "perturb" not in proc.stdout


@pytest.mark.parametrize("op", ["matmul", "layernorm", "reduce"])
def test_opbench_golden_checks_every_timed_family(op, python):
    run = run_opbench(python, op)
    checks = goldens(run)
    variants = {"reduce": ["sum.", "amax."]}.get(op, [""])
    # one check per variant x dtype (fp32, bf16 on cpu) x mode (fwd, fwdbwd)
    assert sorted((c["name"], c["dtype"]) for c in checks) == sorted(
        (f"{op}.{v}{mode}", dtype)
        for v in variants
        for dtype in ("fp32", "bf16")
        for mode in ("fwd", "fwdbwd")
    )
    for c in checks:
        assert c["passed"] is True and c["reference"] == "float64 on cpu", c
        assert c["tolerance"] == golden.TOLERANCES[c["dtype"]]
        # well inside: layernorm's bf16 backward, the largest, is 0.0098 on two threads
        # and 0.0224 on one (the tests' setting, and a one-core machine's), of 0.05
        assert 0 <= c["max_rel_error"] < c["tolerance"] / 2, c
    # Written before the timed rounds.
    first_rate = next(i for i, r in enumerate(run.records) if "rate" in r)
    assert max(i for i, r in enumerate(run.records) if r.get("task") == "golden") < first_rate


def test_opbench_golden_perturbed_fails(python):
    run = run_opbench(python, "softmax", "--dtypes", "fp32", "--golden-perturb", "0.05")
    checks = goldens(run)
    assert {c["name"] for c in checks} == {"softmax.fwd", "softmax.fwdbwd"}
    for c in checks:
        assert c["passed"] is False and c["dtype"] == "fp32"
        assert c["max_rel_error"] == pytest.approx(0.05, abs=1e-5)
    assert "golden softmax.fwd fp32: FAILED" in run.stdout
    assert goldens(run_opbench(python, "softmax", "--golden", "off")) == []


def test_opbench_checks_the_operator_it_times():
    """The timed case and the check call one function: `operator` (no copy to drift)."""
    import torch

    spec = importlib.util.spec_from_file_location("opbench_main", BENCHMARKS / "opbench/main.py")
    opbench = importlib.util.module_from_spec(spec)
    sys.modules["opbench_main"] = opbench  # its dataclasses look their module up
    try:
        spec.loader.exec_module(opbench)
    finally:
        sys.modules.pop("opbench_main", None)

    for op in opbench.OPS:
        for variant in opbench.VARIANTS.get(op, (op,)):
            fn, specs, main = opbench.operator(op, variant, opbench.SHAPES[op]["small"][0])
            timed, main_input = opbench._forward(
                op,
                variant,
                opbench.SHAPES[op]["small"][0],
                torch.float32,
                torch.device("cpu"),
                False,
            )
            assert timed().shape == fn(*[
                torch.randint(0, s[1], (s[2],)) if s[0] == "index" else torch.randn(*s)
                for s in specs
            ]).shape  # fmt: skip
            assert main_input.shape == (
                (specs[main][2],) if specs[main][0] == "index" else specs[main]
            )


SUITE = """
_defaults:
  definition: {flops}
  plan:
    method: per_gpu
  measure: {{warmup_min: 0.1s, warmup_max: 0.5s, min: 0.3s, max: 1s, min_observations: 3,
             startup: 60s}}
  voir:
    options: {{gpu_poll: 0}}
  argv:
    --device: cpu
    --size: 128
    --step-ms: 5

flops-fp32:
  argv:
    --dtype: fp32
    --golden-perturb: 0.05

flops-bf16:
  argv:
    --dtype: bf16
"""


@pytest.mark.slow
def test_milabench_run_fails_on_a_wrong_result(tmp_path: Path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(flops=BENCHMARKS / "flops"))
    env = dict(os.environ, MILABENCH_DASH="no", MILABENCH_RUN_EARLY_STOP_GRACE=STOP_GRACE)
    env.pop("MILABENCH_CONFIG", None)
    cmd = [sys.executable, "-m", "milabench", "run", "--config", str(suite), "--base",
           str(tmp_path), "--use-current-env"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    assert re.search(r"^Verdict: +FAIL \(exit code 1\)$", out, re.M)
    assert "validation layer 'golden' failed" in out
    m = re.search(
        r"flops-fp32: golden check matmul fp32 failed: max relative error (\S+) > tolerance 1e-05",
        out,
    )
    assert m, out[-3000:]
    assert float(m.group(1)) == pytest.approx(0.05, abs=1e-3)
    # Both processes measured: only the golden layer fails the run; bf16 is not named.
    assert "golden check matmul bf16" not in out
    assert re.search(r"^golden +FAILED$", out, re.M)
    assert "Failure rate: 0%" in out
