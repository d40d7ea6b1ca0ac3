"""The run report's statistics and layer selection, checked against independent computations."""

from __future__ import annotations

import math

import pytest

from milabench.errors import UsageError
from milabench.report.stats import quantile, summarize, trim
from milabench.report.validation import ALL_LAYERS, DEFAULT_LAYERS, select_layers


def test_trim_drops_single_min_and_max_from_five_values():
    assert trim([5, 1, 3, 9, 4]) == [3, 4, 5]
    assert trim([3, 1, 2]) == [1, 2, 3]  # fewer than 5: kept
    assert trim([1, float("nan"), 2]) == [1, 2]


def test_quantiles_interpolate_linearly():
    values = sorted([1.0, 2.0, 3.0, 4.0])
    assert quantile(values, 0.25) == pytest.approx(1.75)
    assert quantile(values, 0.5) == pytest.approx(2.5)
    s = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert s.mean == pytest.approx(5.0)
    assert s.std == pytest.approx(math.sqrt(32 / 7))
    assert s.sem == pytest.approx(math.sqrt(32 / 7) / math.sqrt(8))
    assert s.std_pct == pytest.approx(100 * math.sqrt(32 / 7) / 5)
    assert (s.min, s.median, s.max) == (2.0, 4.5, 9.0)


def test_select_layers():
    assert select_layers(None) == list(DEFAULT_LAYERS)
    assert select_layers(["all"]) == list(ALL_LAYERS)
    expected = ["error", "ensure_rate", "version", "loss", "usage", "golden"]
    assert select_layers(["loss,usage"]) == expected
    assert select_layers(["all,-usage"]) == [x for x in ALL_LAYERS if x != "usage"]
    with pytest.raises(UsageError, match="unknown layer 'bogus'"):
        select_layers(["bogus"])
