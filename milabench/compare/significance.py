"""Significance tests, stdlib only: Mann-Whitney U and a bootstrap CI of a ratio of medians.

Rate samples are not normal (warm-up tails, throttling, stragglers), so the comparison
uses a rank test and a percentile bootstrap rather than t-tests.
* Mann-Whitney U, two-sided: the exact distribution of U when there are no ties and both
  samples are small (n <= 30), otherwise the normal approximation with tie correction and
  continuity correction.
* Bootstrap: resample each side with replacement (seeded, so reports are reproducible;
  the resample medians are drawn through their order-statistic law, see
  `bootstrap_medians`, which is exact and O(1) per resample),
  take the ratio of medians B/A, and report the percentile interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from functools import lru_cache

EXACT_MAX_N = 30


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) of `values`, and the sizes of the tie groups."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@lru_cache(maxsize=64)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """Number of arrangements giving each U in 0..m*n, for samples of sizes m and n.

    Built with the classic recurrence f(m, n, u) = f(m-1, n, u-n) + f(m, n-1, u), kept as
    one row per n to stay small.
    """
    # rows[j] = counts for (i, j) at the current i
    rows = [[1] for _ in range(n + 1)]  # i = 0: only U = 0
    for i in range(1, m + 1):
        new_rows = [[1]]  # j = 0: only U = 0
        for j in range(1, n + 1):
            size = i * j + 1
            counts = [0] * size
            prev_i = rows[j]  # f(i-1, j, .)
            for u, c in enumerate(prev_i):
                if c:
                    counts[u + j] += c
            prev_j = new_rows[j - 1]  # f(i, j-1, .)
            for u, c in enumerate(prev_j):
                if c:
                    counts[u] += c
            new_rows.append(counts)
        rows = new_rows
    return tuple(rows[n])


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(U of sample a, two-sided p-value). p = 1 when either sample is empty."""
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        return math.nan, 1.0
    ranks, ties = _ranks(list(a) + list(b))
    r1 = math.fsum(ranks[:m])
    u1 = r1 - m * (m + 1) / 2
    if not ties and m <= EXACT_MAX_N and n <= EXACT_MAX_N:
        counts = _u_counts(m, n)
        total = math.comb(m + n, m)
        k = int(round(u1))
        lower = sum(counts[: k + 1]) / total
        upper = sum(counts[k:]) / total
        return u1, min(1.0, 2 * min(lower, upper))
    big_n = m + n
    tie_term = sum(t**3 - t for t in ties) / (big_n * (big_n - 1))
    var = m * n / 12 * ((big_n + 1) - tie_term)
    if var <= 0:
        return u1, 1.0
    z = (abs(u1 - m * n / 2) - 0.5) / math.sqrt(var)
    return u1, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


def bootstrap_medians(values: Sequence[float], resamples: int, rng: random.Random) -> list[float]:
    """Medians of `resamples` bootstrap resamples of `values`, drawn in O(1) each.

    A resample is n draws from the empirical distribution, i.e. ``sorted_values[floor(U*n)]``
    for n uniforms U; the map is monotone, so the resample's k-th smallest value comes from
    the k-th smallest uniform, which is Beta(k, n - k + 1) distributed, and the next one is
    ``u + (1 - u) * Beta(1, n - k)``. Drawing those order statistics directly gives exactly
    the distribution of resampling-and-sorting, without the O(n log n) per resample.
    """
    ordered = sorted(values)
    n = len(ordered)
    last = n - 1
    out = []
    if n % 2:
        k = n // 2 + 1
        for _ in range(resamples):
            u = rng.betavariate(k, n - k + 1)
            out.append(ordered[min(int(u * n), last)])
    else:
        k = n // 2
        for _ in range(resamples):
            u1 = rng.betavariate(k, n - k + 1)
            u2 = u1 + (1.0 - u1) * rng.betavariate(1, n - k)
            out.append((ordered[min(int(u1 * n), last)] + ordered[min(int(u2 * n), last)]) / 2)
    return out


def bootstrap_ratio_ci(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(b) / median(a)."""
    if not a or not b:
        return math.nan, math.nan
    rng = random.Random(seed)
    med_a = bootstrap_medians(a, resamples, rng)
    med_b = bootstrap_medians(b, resamples, rng)
    ratios = sorted(mb / ma for ma, mb in zip(med_a, med_b, strict=True) if ma != 0)
    if not ratios:
        return math.nan, math.nan
    lo_i = int(math.floor((1 - level) / 2 * (len(ratios) - 1)))
    hi_i = int(math.ceil((1 + level) / 2 * (len(ratios) - 1)))
    return ratios[lo_i], ratios[hi_i]
