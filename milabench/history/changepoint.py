"""Change points over a whole series of results (E-Divisive means), standard library only.

Every change point of a series (one value per stored run, typically its rate) is found
with E-Divisive means (Matteson & James, JASA 2014, in the fixed-segment form of
Hunter/Otava): the split of a segment with the largest energy statistic is kept when a
seeded permutation test gives p <= ``alpha``, both sides are searched again (at least
``min_size`` values on each side), and changes whose relative difference of segment
medians is below ``min_effect`` are dropped, weakest first, merging their segments.
Distance sums come from prefix sums and a Fenwick tree (O(n log n) per scan), and a
shuffle test stops as soon as p exceeds ``alpha``. The statistic, why each step, and
what it costs: docs/history.md "Change points".
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ChangePoint", "detect"]


@dataclass(frozen=True)
class ChangePoint:
    """One change in a series; indices are those of the series given to `detect`."""

    index: int  # first value AFTER the change (series[index] is the first "after" run)
    before_median: float  # median of the segment before (up to the previous change point)
    after_median: float  # median of the segment after (up to the next change point)
    change: float  # after_median / before_median - 1 (e.g. -0.10 for a 10% drop)
    p_value: float  # significance from the permutation test
    regression: bool  # True when the change is in the bad direction (see higher_is_better)


def _is_missing(value) -> bool:
    if value is None:
        return True
    try:
        return not math.isfinite(float(value))
    except (TypeError, ValueError):
        return True


def _ranks_and_distances(x: Sequence[float]) -> tuple[list[int], list[float], float]:
    """Ranks (1..n, ties broken arbitrarily), sum_j |x_i - x_j| for each i, and their total/2.

    Ties may get distinct ranks: |x_i - x_j| is 0 for them whichever side they count on.
    """
    n = len(x)
    order = sorted(range(n), key=x.__getitem__)
    ranks = [0] * n
    dist = [0.0] * n
    total = math.fsum(x)
    below = 0.0  # sum of the values before position p in sorted order
    for p, i in enumerate(order):
        v = x[i]
        ranks[i] = p + 1
        above = total - below - v
        dist[i] = (v * p - below) + (above - v * (n - p - 1))
        below += v
    return ranks, dist, math.fsum(dist) / 2


def _best_split(
    x: Sequence[float], ranks: Sequence[int], dist: Sequence[float], total: float, min_size: int
) -> tuple[float, int]:
    """The largest Q(t) over min_size <= t <= n - min_size, and its t.

    Scanning t upward, a_t = sum_{i<t} |x_t - x_i| comes from a Fenwick tree over ranks
    (count and sum of the values already seen that rank below x_t), then
        W_L(t) = sum_{s<t} a_s                       (pairs inside the left side)
        B(t)   = sum_{s<t} dist_s - 2 W_L(t)         (pairs across the split)
        W_R(t) = total - W_L(t) - B(t)               (pairs inside the right side)
    """
    n = len(x)
    cnt = [0] * (n + 1)
    sm = [0.0] * (n + 1)
    w_left = 0.0
    dist_left = 0.0
    sum_left = 0.0
    best, best_t = -math.inf, -1
    last = n - min_size
    for t in range(last + 1):
        if t >= min_size:
            m, k = t, n - t
            across = dist_left - 2.0 * w_left
            w_right = total - w_left - across
            q = 2.0 * across / n - (k * w_left / (n * (m - 1)) + m * w_right / (n * (k - 1))) * 2.0
            if q > best:
                best, best_t = q, t
        if t == last:
            break
        v = x[t]
        r = ranks[t]
        # values seen so far with rank < r: count and sum
        c, s = 0, 0.0
        j = r - 1
        while j > 0:
            c += cnt[j]
            s += sm[j]
            j &= j - 1
        a = (c * v - s) + ((sum_left - s) - (t - c) * v)
        j = r
        while j <= n:
            cnt[j] += 1
            sm[j] += v
            j += j & -j
        w_left += a
        dist_left += dist[t]
        sum_left += v
    return best, best_t


def _split_test(
    x: Sequence[float], min_size: int, permutations: int, alpha: float, rng: random.Random
) -> tuple[int, float] | None:
    """The best split of `x` and its permutation p-value, or None when not significant."""
    n = len(x)
    ranks, dist, total = _ranks_and_distances(x)
    if total <= 0.0:  # all values equal
        return None
    observed, t = _best_split(x, ranks, dist, total, min_size)
    if t < 0:
        return None
    # p <= alpha  <=>  exceed <= alpha * (permutations + 1) - 1: stop once past that.
    allowed = alpha * (permutations + 1) - 1 + 1e-9
    if allowed < 0:
        return None
    tolerance = 1e-9 * abs(observed)
    exceed = 0
    order = list(range(n))
    for _ in range(permutations):
        rng.shuffle(order)
        stat, _t = _best_split(
            [x[i] for i in order],
            [ranks[i] for i in order],
            [dist[i] for i in order],
            total,
            min_size,
        )
        if stat >= observed - tolerance:
            exceed += 1
            if exceed > allowed:
                return None
    return t, (1 + exceed) / (permutations + 1)


def _relative_change(before: float, after: float) -> float:
    if before == 0.0:
        return 0.0 if after == 0.0 else math.copysign(math.inf, after)
    return after / before - 1.0


def detect(
    values: Sequence[float],
    *,
    min_effect: float = 0.05,
    alpha: float = 0.01,
    min_size: int = 3,
    permutations: int = 199,
    higher_is_better: bool = True,
    seed: int = 0,
) -> list[ChangePoint]:
    """Change points of `values` (in order of index), by E-Divisive means.

    `values` is one number per run in time order; None, NaN and infinities are skipped
    but the indices returned are those of `values`. A change is kept when its split is
    significant (permutation p <= `alpha`, `permutations` seeded shuffles) and the medians
    of its adjacent segments differ by at least `min_effect` (relative). `regression` is a
    drop when `higher_is_better` (rates), a rise otherwise (durations, memory).
    """
    min_size = max(2, int(min_size))  # the within-side sums need two values per side
    where = [i for i, v in enumerate(values) if not _is_missing(v)]
    x = [float(values[i]) for i in where]
    n = len(x)
    if n < 2 * min_size:
        return []

    # Recursive splitting (explicit stack; a segment's shuffles are seeded by its bounds
    # so the result does not depend on the order segments are visited).
    found: dict[int, float] = {}
    stack = [(0, n)]
    while stack:
        lo, hi = stack.pop()
        if hi - lo < 2 * min_size:
            continue
        rng = random.Random(f"{seed}/{lo}/{hi}")
        result = _split_test(x[lo:hi], min_size, permutations, alpha, rng)
        if result is None:
            continue
        t, p = result
        found[lo + t] = p
        stack.append((lo + t, hi))
        stack.append((lo, lo + t))

    # Effect-size filter: drop the weakest change below min_effect, merge, measure again.
    cuts = sorted(found)
    while cuts:
        bounds = [0, *cuts, n]
        medians = [statistics.median(x[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
        changes = [_relative_change(medians[i], medians[i + 1]) for i in range(len(cuts))]
        weakest = min(range(len(cuts)), key=lambda i: abs(changes[i]))
        if abs(changes[weakest]) >= min_effect:
            break
        del cuts[weakest]

    if not cuts:
        return []
    bounds = [0, *cuts, n]
    medians = [statistics.median(x[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    points = []
    for i, cut in enumerate(cuts):
        change = _relative_change(medians[i], medians[i + 1])
        points.append(
            ChangePoint(
                index=where[cut],
                before_median=medians[i],
                after_median=medians[i + 1],
                change=change,
                p_value=found[cut],
                regression=change < 0 if higher_is_better else change > 0,
            )
        )
    return points
