"""opbench's scored rate: a geometric mean over cases that ignores the calibration.

The calibration decides how many calls of each case a round makes (``repeat``); it is
noisy, so a score that depended on it moved between runs while every case ran at the same
speed. These tests load opbench's own functions and feed them known per-call durations.
"""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from .conftest import BENCHMARKS, bench_env, run_with_pipe

pytest.importorskip("torch")


def _opbench():
    spec = importlib.util.spec_from_file_location("opbench_main", BENCHMARKS / "opbench/main.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


opbench = _opbench()


def _case(name: str, per_call: float, calls: int):
    case = opbench.Case(name, fn=lambda: None, elements=1, repeat=calls)
    case.samples.extend([per_call] * calls)
    return case


def test_geometric_mean_of_case_rates():
    cases = [_case("fast", 1e-5, 200), _case("slow", 1e-2, 1)]  # 100,000 and 100 calls/s
    rate = opbench.geometric_mean_rate(cases, [0, 0])
    assert rate == pytest.approx(math.sqrt(100_000 * 100))


def test_score_does_not_depend_on_repeat_counts():
    """Same per-call speed, different calibration: same score (not so for calls/round)."""
    a = [_case("fast", 1e-5, 200), _case("slow", 1e-2, 1)]
    b = [_case("fast", 1e-5, 350), _case("slow", 1e-2, 2)]
    assert opbench.geometric_mean_rate(a, [0, 0]) == pytest.approx(
        opbench.geometric_mean_rate(b, [0, 0])
    )
    calls_a = sum(c.repeat for c in a) / sum(sum(c.samples) for c in a)
    calls_b = sum(c.repeat for c in b) / sum(sum(c.samples) for c in b)
    assert abs(calls_a / calls_b - 1) > 0.05  # the old figure did move


def test_only_the_round_samples_count():
    case = _case("op", 1e-3, 10)  # an earlier round at 1,000 calls/s
    mark = len(case.samples)
    case.samples.extend([2e-3] * 5)  # this round: 500 calls/s
    assert opbench.geometric_mean_rate([case], [mark]) == pytest.approx(500)


def test_case_without_samples_gives_nan():
    case = _case("op", 1e-3, 3)
    assert math.isnan(opbench.geometric_mean_rate([case], [3]))


def test_round_size_reports_the_geometric_mean_through_the_iterator():
    """`TimedIterator` reads the size after the round: size / round time == G."""
    work = opbench.RoundWork()
    size = work.next_round(0)
    assert math.isnan(float(size))  # unknown until the round ran
    cases = [_case("fast", 1e-5, 100), _case("slow", 1e-3, 1)]
    work.finish(cases, [0, 0], seconds=0.002)
    assert float(size) / 0.002 == pytest.approx(math.sqrt(100_000 * 1_000))
    assert work.next_round(1) is not size  # a fresh holder per round


@pytest.mark.parametrize("flag", ["--round-ms", "--case-ms"])
@pytest.mark.parametrize("value", ["0", "-5", "fast"])
def test_round_and_case_ms_reject_bad_values(flag, value, python):
    """A duration that times nothing is a usage error naming the flag, before any work."""
    run = run_with_pipe(
        [python, "main.py", "--op", "matmul", flag, value, "--device", "cpu"],
        bench_env(),
        BENCHMARKS / "opbench",
        timeout=60,
    )
    assert run.returncode == 2
    assert flag in run.stderr and "Traceback" not in run.stderr
    assert run.records == []
