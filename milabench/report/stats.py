"""Small descriptive statistics, stdlib only (numpy is not a milabench dependency).

The conventions are written down here once so that the report, the comparison and any
independent re-computation (tests, docs/reports.md) agree:
* standard deviation is the sample one (n - 1 denominator), 0 for a single value;
* quantiles interpolate linearly between order statistics (numpy's default "linear");
* `trim` drops the single minimum and maximum when there are 5 values or more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def trim(values: Sequence[float]) -> list[float]:
    """Sorted copy without the single min and max (when there are at least 5 values)."""
    ordered = sorted(v for v in values if not math.isnan(v))
    if len(ordered) >= 5:
        return ordered[1:-1]
    return ordered


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def stdev(values: Sequence[float]) -> float:
    n = len(values)
    if n == 0:
        return math.nan
    if n == 1:
        return 0.0
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between the order statistics of already sorted values."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def median(values: Sequence[float]) -> float:
    return quantile(sorted(values), 0.5)


@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of one sample."""

    count: int
    mean: float
    std: float
    sem: float
    min: float
    q1: float
    median: float
    q3: float
    max: float

    @property
    def std_pct(self) -> float:
        return _relative(self.std, self.mean)

    @property
    def sem_pct(self) -> float:
        return _relative(self.sem, self.mean)


def _relative(x: float, m: float) -> float:
    if m == 0 or math.isnan(m) or math.isnan(x):
        return math.nan
    return 100.0 * x / abs(m)


def summarize(values: Sequence[float]) -> Summary:
    """Summary of values that are already trimmed (see `trim`)."""
    ordered = sorted(values)
    n = len(ordered)
    sd = stdev(ordered)
    return Summary(
        count=n,
        mean=mean(ordered),
        std=sd,
        sem=sd / math.sqrt(n) if n else math.nan,
        min=ordered[0] if n else math.nan,
        q1=quantile(ordered, 0.25),
        median=quantile(ordered, 0.5),
        q3=quantile(ordered, 0.75),
        max=ordered[-1] if n else math.nan,
    )
