"""Comparisons: the significance tests checked against independent computations, the
labels and thresholds of one benchmark, and the printed comparison."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from milabench.compare.comparison import (
    Comparison,
    Threshold,
    compare_one,
    parse_relative,
    render_comparison,
)
from milabench.compare.significance import bootstrap_medians, bootstrap_ratio_ci, mann_whitney_u
from milabench.report.stats import median, quantile


def _brute_force_p(a, b):
    """Two-sided exact p-value by enumerating every split of the pooled sample."""
    pooled = list(a) + list(b)
    m = len(a)

    def u_of(idx):
        xs = [pooled[i] for i in idx]
        ys = [pooled[i] for i in range(len(pooled)) if i not in idx]
        return sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)

    u_obs = u_of(set(range(m)))
    us = [u_of(set(c)) for c in itertools.combinations(range(len(pooled)), m)]
    lower = sum(u <= u_obs for u in us) / len(us)
    upper = sum(u >= u_obs for u in us) / len(us)
    return u_obs, min(1.0, 2 * min(lower, upper))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_mann_whitney_exact_matches_enumeration(seed):
    rng = random.Random(seed)
    a = [rng.random() for _ in range(6)]
    b = [rng.random() + 0.3 * seed for _ in range(5)]
    u, p = mann_whitney_u(a, b)
    u_ref, p_ref = _brute_force_p(a, b)
    assert u == pytest.approx(u_ref)
    assert p == pytest.approx(p_ref)


def test_mann_whitney_known_value_and_ties():
    a = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
    b = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29]
    u, p = mann_whitney_u(a, b)
    assert u == 58 and p == pytest.approx(0.1329, abs=1e-4)  # textbook example
    # with ties the normal approximation is used; identical samples: p = 1
    assert mann_whitney_u([1, 1, 2, 2], [1, 1, 2, 2])[1] == pytest.approx(1.0)
    # clearly separated large samples: tiny p
    assert mann_whitney_u(list(range(50)), [x + 100 for x in range(50)])[1] < 1e-10


def test_bootstrap_is_seeded_and_brackets_the_true_ratio():
    rng = random.Random(7)
    a = [100 + rng.gauss(0, 3) for _ in range(40)]
    b = [85 + rng.gauss(0, 3) for _ in range(40)]
    lo, hi = bootstrap_ratio_ci(a, b, seed=3)
    assert (lo, hi) == bootstrap_ratio_ci(a, b, seed=3)
    assert lo < 0.85 < hi and hi < 0.9


def test_compare_one_labels_and_thresholds():
    rng = random.Random(1)
    a = [100 + rng.gauss(0, 2) for _ in range(30)]
    same = [100 + rng.gauss(0, 2) for _ in range(30)]
    slow = [85 + rng.gauss(0, 2) for _ in range(30)]
    r = compare_one("x", a, same, threshold=Threshold())
    assert r.label == "not significant" and not r.regression
    r = compare_one("x", a, slow, threshold=Threshold())
    assert r.label == "slower" and r.regression and r.p_value < 1e-6
    # significant but inside a 20% threshold: not a regression
    assert not compare_one("x", a, slow, threshold=Threshold(relative=0.2)).regression
    # absolute threshold alone
    assert compare_one("x", a, slow, threshold=Threshold(None, 10.0)).regression
    assert not compare_one("x", a, slow, threshold=Threshold(None, 20.0)).regression
    assert compare_one("x", a, [], threshold=Threshold()).label == "missing in B"


def test_parse_relative():
    assert parse_relative("5%", "t") == pytest.approx(0.05)
    assert parse_relative(0.1, "t") == pytest.approx(0.1)
    assert parse_relative(10, "t") == pytest.approx(0.1)


def test_fast_bootstrap_medians_match_naive_resampling():
    """The order-statistic shortcut has the same distribution as resample-and-sort."""
    values = [1.0, 2.0, 2.5, 4.0, 7.0, 7.5, 9.0, 10.0]  # even n
    for vals in (values, values[:-1]):  # and odd n
        rng = random.Random(5)
        fast = bootstrap_medians(vals, 20000, rng)
        naive = [median(rng.choices(vals, k=len(vals))) for _ in range(20000)]
        for q in (0.05, 0.25, 0.5, 0.75, 0.95):
            assert quantile(sorted(fast), q) == pytest.approx(quantile(sorted(naive), q), abs=0.51)
        assert sum(fast) / len(fast) == pytest.approx(sum(naive) / len(naive), rel=0.02)
        # every fast median is a value, or the mean of two values, of the sample
        pairs = {(x + y) / 2 for x in vals for y in vals} | set(vals)
        assert set(fast) <= pairs


def test_comparison_prints_tiny_rates_with_three_significant_digits():
    """A bf16 matmul on a CPU without bf16 runs at ~0.001 TFLOPS: two fixed decimals
    would print both medians as 0.00."""
    rng = random.Random(2)
    a = [0.000851 * (1 + rng.gauss(0, 0.01)) for _ in range(20)]
    b = [0.000912 * (1 + rng.gauss(0, 0.01)) for _ in range(20)]
    row = compare_one("flops-bf16", a, b, threshold=Threshold())
    for fmt in ("text", "markdown"):
        text = render_comparison(Comparison("A", "B", [row]), fmt)
        medians = re.findall(r"\b0\.000(\d{3})\b", text)
        assert len(medians) == 2, text  # both medians with 3 significant digits
        assert "0.00 " not in text and "| 0.00 |" not in text
