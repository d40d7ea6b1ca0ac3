"""The measurement window: when warm-up ends, when measurement ends, how precise a rate is.

The window is defined in seconds, never in steps: warm-up lasts at least ``warmup_min``
and until the step time has settled, at most ``warmup_max``; measurement lasts ``min`` to
``max`` seconds and ends as soon as the 95% interval of the mean rate is within
``precision`` with ``min_observations`` observations, or, after ``min``, when that target
is out of reach (`Window.unreachable`). ``stop`` and ``skip`` (step counts of upstream's
``voir.options``) are optional extra bounds. The interval uses batch means over 10 to 20
consecutive batches kept as running sums (`BatchMeans`: constant memory). The rules,
their defaults and the reasoning: docs/measurement.md sections 1-2.

Standard library only (copied into every benchmark environment); `milabench.report`
uses the same functions, so the interval in a report is the one the benchmark stopped on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
_Z975 = 1.959963984540054

MIN_BATCHES = 10
MAX_BATCHES = 20


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (df >= 1).

    A table up to 30, then the Cornish-Fisher expansion around the normal quantile
    (error below 1e-4 from df = 31 on).
    """
    if df < 1:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


class BatchMeans:
    """Running batch means of a series: constant memory, a t interval over the batches.

    Batches start with one value each; when there are ``2 * max_batches`` full batches,
    neighbours are merged pairwise (the batch size doubles), so there are always between
    ``max_batches`` and ``2 * max_batches`` full batches once the series is long enough.
    A short series (fewer values than ``min_batches``) has one value per batch: the
    plain t interval, the best that can be done with so few values.
    """

    __slots__ = ("_sums", "_size", "_partial_sum", "_partial_n", "n", "total", "max_batches")

    def __init__(self, max_batches: int = MAX_BATCHES // 2) -> None:
        # Merging happens at 2 * max_batches, so the count of full batches stays in
        # [max_batches, 2 * max_batches): [10, 20) with the default.
        self.max_batches = max(2, int(max_batches))
        self._sums: list[float] = []
        self._size = 1
        self._partial_sum = 0.0
        self._partial_n = 0
        self.n = 0
        self.total = 0.0

    def add(self, value: float) -> None:
        self.n += 1
        self.total += value
        self._partial_sum += value
        self._partial_n += 1
        if self._partial_n == self._size:
            self._sums.append(self._partial_sum)
            self._partial_sum = 0.0
            self._partial_n = 0
            if len(self._sums) >= 2 * self.max_batches:
                sums = self._sums
                self._sums = [sums[i] + sums[i + 1] for i in range(0, len(sums) - 1, 2)]
                self._size *= 2

    def extend(self, values: Iterable[float]) -> None:
        for v in values:
            self.add(v)

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else math.nan

    @property
    def batches(self) -> int:
        return len(self._sums)

    def interval(self) -> tuple[float, float] | None:
        """(mean, half-width) of the 95% interval of the mean, or None (< 2 batches).

        The centre is the mean of every value added; the spread comes from the full
        batches (the partial last batch has a different variance and is left out of it).
        """
        b = len(self._sums)
        if b < 2:
            return None
        size = self._size
        means = [s / size for s in self._sums]
        m = math.fsum(means) / b
        var = math.fsum((x - m) ** 2 for x in means) / (b - 1)
        half = t975(b - 1) * math.sqrt(var / b)
        return self.mean, half


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% interval, computed with batch means."""

    mean: float
    low: float
    high: float
    observations: int
    batches: int

    @property
    def halfwidth(self) -> float:
        """Half-width relative to the mean (0.02 = +/-2%); inf when it cannot be told."""
        if not self.mean or math.isnan(self.mean):
            return math.inf
        return (self.high - self.low) / 2 / abs(self.mean)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def rate_interval(values: Sequence[float]) -> Interval | None:
    """95% interval of the mean of a time-ordered series (None for fewer than 2 values)."""
    bm = BatchMeans()
    bm.extend(v for v in values if not math.isnan(v))
    found = bm.interval()
    if found is None:
        return None
    mean, half = found
    return Interval(mean, mean - half, mean + half, bm.n, bm.batches)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return math.nan
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def has_settled(durations: Sequence[float], tolerance: float, span: float = 0.25) -> bool:
    """Whether the step time has stopped drifting at the end of ``durations``.

    Compares the median of the last ``k`` step durations with the median of the ``k``
    before, ``k`` being the number of recent steps that last about ``span`` seconds (3 at
    least): a few steps when they are slow, more when they are fast, so that one noisy
    step does not decide.
    """
    if len(durations) < 6:
        return False
    recent = median(durations[-3:])
    k = 3 if recent <= 0 else max(3, min(len(durations) // 2, int(span / recent)))
    if len(durations) < 2 * k:
        return False
    last = median(durations[-k:])
    before = median(durations[-2 * k : -k])
    if before <= 0:
        return False
    return abs(last - before) / before <= tolerance


@dataclass(frozen=True)
class WindowSettings:
    """The measurement window of one benchmark, in seconds (see the module docstring)."""

    warmup_min: float = 1.0
    warmup_max: float = 10.0
    settle: float = 0.05
    min: float = 6.0
    max: float = 30.0
    precision: float = 0.02
    min_observations: int = 10
    stop_unreachable: bool = True  # end early when the target cannot be met by max
    stop: int = 0  # measured observations at most (0: no count bound)
    skip: int = 0  # warm-up observations at least


WARMUP = "warmup"
MEASURE = "measure"
DONE = "done"

# The target-unreachable rule (docs/measurement.md, "Stop when more time cannot help").
# If the noise averages out, the interval's half-width h falls as t^-1/2 (half-width
# ratio 0.71 per doubling of the window). At time t the rule compares h(t) with h at about
# t/2 and reads the exponent ``a`` of the shrinkage seen, h ~ t^-a. The window ends when
# (1) ``a`` is below `STALLED_EXPONENT` (the interval has stopped shrinking as it should)
# and (2) h(t) x (t / max)^p is still above `UNREACHABLE_MARGIN` x precision, where
# p = min(`PROJECTION_EXPONENT`, max(a, 0) + `EXPONENT_ALLOWANCE`): the interval is given
# credit for shrinking faster from now on than it was seen to (up to an ideal average's
# rate), and it would still be short of the target at max. The allowance and the margin
# absorb the noise of a half-width estimated from 10-20 batch means (about 20%). The
# values were chosen on recorded rate streams of a noisy and a quiet host and must never
# end a window that would have met its target (scripts/window_replay.py).
STALLED_EXPONENT = 0.25
PROJECTION_EXPONENT = 0.5
EXPONENT_ALLOWANCE = 0.5
UNREACHABLE_MARGIN = 1.5


@dataclass
class Window:
    """The state machine of one measurement window.

    The caller (`benchkit.meter.Meter`) times steps and, a few times a second,
    hands over the steps completed since the last call: `add_warmup` for steps issued
    during warm-up, `add_measured` for the others; then `update` decides whether warm-up
    or measurement is over. ``done`` becomes true with ``reason`` saying why
    (``precision``, ``max_time``, ``stop_count``, ``unreachable``); `finish` records ``ended`` (or
    ``ended_in_warmup``) when the loop ran out first.

    Steps are routed by the caller, not by the time they are handed over, because on an
    accelerator a step issued during warm-up may complete after measurement began.
    """

    settings: WindowSettings = field(default_factory=WindowSettings)
    phase: str = WARMUP
    reason: str | None = None
    started: float | None = None
    measure_started: float | None = None
    warmup_durations: list[float] = field(default_factory=list)
    warmup_seconds: float = 0.0
    settled: bool = False
    stats: BatchMeans = field(default_factory=BatchMeans)
    measured_seconds: float = 0.0
    busy_seconds: float = 0.0  # sum of the measured steps' own durations
    # (measured seconds, relative half-width, observations) at each decision: the
    # target-unreachable rule compares the interval now with the interval at half the time
    history: list[tuple[float, float, int]] = field(default_factory=list)
    unreachable_detail: dict[str, Any] | None = None  # why the window gave up, when it did
    stalled_exponent: float = STALLED_EXPONENT
    projection_exponent: float = PROJECTION_EXPONENT
    exponent_allowance: float = EXPONENT_ALLOWANCE
    unreachable_margin: float = UNREACHABLE_MARGIN

    @property
    def done(self) -> bool:
        return self.phase == DONE

    @property
    def measuring(self) -> bool:
        return self.phase == MEASURE

    @property
    def observations(self) -> int:
        return self.stats.n

    def start(self, now: float) -> None:
        """The first step begins (later calls are ignored)."""
        if self.started is None:
            self.started = now
            s = self.settings
            if s.warmup_max <= 0 and s.skip <= 0:
                self.begin_measure(now)

    def add_warmup(self, durations: Sequence[float]) -> None:
        self.warmup_durations.extend(durations)

    def add_measured(self, durations: Sequence[float], rates: Sequence[float]) -> None:
        self.stats.extend(rates)
        self.busy_seconds += math.fsum(durations)

    def update(self, now: float) -> bool:
        """Re-evaluate the phase at time ``now``; True when it changed."""
        if self.started is None:
            self.start(now)
        phase = self.phase
        if phase == WARMUP:
            self._check_warmup(now)
        if self.phase == MEASURE:
            self._check_measure(now)
        return self.phase != phase

    def _check_warmup(self, now: float) -> None:
        s = self.settings
        elapsed = now - (self.started if self.started is not None else now)
        n = len(self.warmup_durations)
        if n < max(1, s.skip) or elapsed < s.warmup_min:
            return
        if s.warmup_max > 0:
            self.settled = has_settled(self.warmup_durations, s.settle)
        if self.settled or elapsed >= s.warmup_max:
            self.begin_measure(now)

    def begin_measure(self, now: float) -> None:
        """Warm-up is over at ``now`` (also called by the iterator when a step count alone
        decides it)."""
        self.phase = MEASURE
        self.measure_started = now
        if self.started is not None:
            self.warmup_seconds = now - self.started

    def _check_measure(self, now: float) -> None:
        s = self.settings
        start = self.measure_started if self.measure_started is not None else now
        self.measured_seconds = now - start
        n = self.stats.n
        if s.stop and n >= s.stop:
            self.end("stop_count")
        elif s.max and self.measured_seconds >= s.max:
            self.end("max_time")
        elif s.max and self.measured_seconds >= s.min and n >= s.min_observations:
            found = self.stats.interval()
            if found is not None and found[0] and found[1] / abs(found[0]) <= s.precision:
                self.end("precision")
            elif found is not None and found[0]:
                halfwidth = found[1] / abs(found[0])
                self.history.append((self.measured_seconds, halfwidth, n))
                if s.stop_unreachable and self.unreachable(self.measured_seconds, halfwidth):
                    self.end("unreachable")
        elif s.max and n >= s.min_observations:
            found = self.stats.interval()
            if found is not None and found[0]:
                self.history.append((self.measured_seconds, found[1] / abs(found[0]), n))

    def unreachable(self, t: float, halfwidth: float) -> bool:
        """Whether the target cannot be met by ``max`` (see `STALLED_EXPONENT`): the
        interval at ``t`` compared with the last one recorded at ``t / 2`` or before (with
        at least ``min_observations``). Sets `unreachable_detail` when it cannot."""
        s = self.settings
        if not s.max or t >= s.max or halfwidth <= s.precision:
            return False
        earlier = None
        for entry in self.history:
            if entry[0] > t / 2:
                break
            if entry[2] >= s.min_observations and entry[1] > 0:
                earlier = entry
        if earlier is None or earlier[0] <= 0:
            return False
        t1, h1, _ = earlier
        exponent = math.log(h1 / halfwidth) / math.log(t / t1)
        if exponent >= self.stalled_exponent:
            return False
        credit = min(self.projection_exponent, max(exponent, 0.0) + self.exponent_allowance)
        projected = halfwidth * (t / s.max) ** credit
        if projected <= self.unreachable_margin * s.precision:
            return False
        self.unreachable_detail = {
            "at_s": round(t, 3),
            "halfwidth": halfwidth,
            "earlier_s": round(t1, 3),
            "earlier_halfwidth": h1,
            "exponent": round(exponent, 3),
            "credit": round(credit, 3),
            "projected_halfwidth": projected,
        }
        return True

    def end(self, reason: str) -> None:
        """The window is over, for ``reason``."""
        self.phase = DONE
        self.reason = reason

    def finish(self, now: float) -> None:
        """The loop ended before the window did (the script ran out of data or stopped)."""
        if self.phase == DONE:
            return
        if self.phase == MEASURE:
            start = self.measure_started if self.measure_started is not None else now
            self.measured_seconds = now - start
            self.end("ended")
        else:
            if self.started is not None:
                self.warmup_seconds = now - self.started
            self.end("ended_in_warmup")

    def interval(self) -> Interval | None:
        found = self.stats.interval()
        if found is None:
            return None
        mean, half = found
        return Interval(mean, mean - half, mean + half, self.stats.n, self.stats.batches)

    def warmup_record(self) -> dict[str, Any]:
        """The ``warmup`` record written when measurement begins."""
        return {
            "seconds": round(self.warmup_seconds, 6),
            "observations": len(self.warmup_durations),
            "settled": self.settled,
        }

    def summary(self) -> dict[str, Any]:
        """The ``window`` record written when the window ends (docs/measurement.md)."""
        s = self.settings
        ci = self.interval()
        halfwidth = ci.halfwidth if ci is not None else None
        met = bool(
            ci is not None
            and halfwidth is not None
            and halfwidth <= s.precision
            and self.stats.n >= s.min_observations
        )
        return {
            "observations": self.stats.n,
            "warmup_s": round(self.warmup_seconds, 6),
            "warmup_observations": len(self.warmup_durations),
            "settled": self.settled,
            "measured_s": round(self.measured_seconds, 6),
            "mean": self.stats.mean if self.stats.n else None,
            "ci95": [ci.low, ci.high] if ci is not None else None,
            "halfwidth": halfwidth if halfwidth is not None and math.isfinite(halfwidth) else None,
            "batches": self.stats.batches,
            "target": s.precision,
            "met": met,
            "min_observations": s.min_observations,
            "reason": self.reason,
            **({"unreachable": self.unreachable_detail} if self.reason == "unreachable" else {}),
        }
