"""The measurement window's statistics and stopping rule, on synthetic rate streams.

Streams are generated with a seeded RNG and driven with a simulated clock (the window
takes ``now`` as an argument), so every check is exact and takes milliseconds: a stream
with a known variance must stop when, and only when, its interval is narrow enough.
"""

import math
import random
import statistics

import pytest

from benchkit.window import (
    BatchMeans,
    Window,
    WindowSettings,
    has_settled,
    rate_interval,
    t975,
)


def test_t_quantiles():
    assert t975(1) == pytest.approx(12.706, abs=1e-3)
    assert t975(10) == pytest.approx(2.228, abs=1e-3)
    assert t975(40) == pytest.approx(2.021, abs=1e-3)  # expansion beyond the table
    assert t975(100) == pytest.approx(1.984, abs=1e-3)
    assert t975(10**6) == pytest.approx(1.960, abs=1e-3)
    assert t975(0) == math.inf


def test_batch_means_keep_10_to_20_batches_in_constant_memory():
    bm = BatchMeans()
    for i in range(1, 5001):
        bm.add(float(i))
        if i >= 20:
            assert 10 <= bm.batches < 20
    assert bm.n == 5000 and bm.mean == pytest.approx(2500.5)
    assert len(bm._sums) < 20


def test_short_series_is_the_plain_t_interval():
    values = [10.0, 12.0, 11.0, 13.0, 9.0]
    ci = rate_interval(values)
    sd = statistics.stdev(values)
    assert ci.batches == 5
    assert ci.high - ci.mean == pytest.approx(t975(4) * sd / math.sqrt(5))
    assert rate_interval([5.0]) is None


def _ar1(rng, n, mean, sd, phi):
    """A stationary AR(1) series: successive values correlated with coefficient phi."""
    x = rng.gauss(0, sd)
    out = []
    noise = sd * math.sqrt(1 - phi * phi)
    for _ in range(n):
        x = phi * x + rng.gauss(0, noise)
        out.append(mean + x)
    return out


def _coverage(series_of, trials, naive=False):
    hits = 0
    for k in range(trials):
        values = series_of(random.Random(k))
        if naive:
            m = statistics.fmean(values)
            h = 1.96 * statistics.stdev(values) / math.sqrt(len(values))
            hits += m - h <= 100 <= m + h
        else:
            hits += rate_interval(values).contains(100.0)
    return hits / trials


def test_interval_covers_the_true_mean_95_percent_of_the_time():
    cover = _coverage(lambda rng: [rng.gauss(100, 5) for _ in range(300)], 400)
    assert 0.91 <= cover <= 0.99


def test_correlated_steps_do_not_make_the_interval_look_tighter():
    """With strongly correlated successive rates (a slow period lasting many steps) the
    naive interval misses the true mean most of the time; batch means stay honest."""

    def series(rng):
        return _ar1(rng, 2000, 100, 5, 0.9)

    naive = _coverage(series, 300, naive=True)
    batched = _coverage(series, 300)
    assert naive < 0.6
    assert batched >= 0.88


def drive(settings, rates, step_s, start=0.0):
    """Feed ``rates`` one step of ``step_s`` seconds at a time, deciding after each step
    like the iterator does every quarter second. Returns (window, decisions) where
    decisions are (now, done, halfwidth or None, n) after each update."""
    w = Window(settings)
    w.start(start)
    now = start
    decisions = []
    for rate in rates:
        now += step_s
        if w.measuring:
            w.add_measured([step_s], [rate])
        else:
            w.add_warmup([step_s])
        w.update(now)
        ci = w.interval()
        decisions.append((now, w.done, ci.halfwidth if ci else None, w.observations))
        if w.done:
            break
    return w, decisions


def test_stops_when_and_only_when_the_interval_is_narrow_enough():
    s = WindowSettings(warmup_min=0.5, warmup_max=2, min=2, max=30, precision=0.02)
    rng = random.Random(7)
    rates = [rng.gauss(100, 10) for _ in range(10_000)]  # 10% noise: needs ~100 steps
    w, decisions = drive(s, rates, 0.01)
    assert w.done and w.reason == "precision"
    measure_start = w.measure_started
    for now, _done, half, n in decisions[:-1]:  # every earlier decision had a reason to go on
        if now - measure_start >= s.min and n >= s.min_observations and half is not None:
            assert half > s.precision
    _, _, half, n = decisions[-1]
    assert half <= s.precision and n >= s.min_observations
    assert w.measured_seconds >= s.min
    # the interval it stopped on is what the summary reports
    summary = w.summary()
    assert summary["met"] and summary["reason"] == "precision"
    assert summary["halfwidth"] == pytest.approx(half)


def test_a_quiet_stream_stops_at_min_and_never_before():
    s = WindowSettings(warmup_min=0.2, warmup_max=1, min=3, max=30, precision=0.02)
    rng = random.Random(1)
    w, decisions = drive(s, [rng.gauss(100, 1) for _ in range(100_000)], 0.05)
    assert w.reason == "precision"
    assert s.min <= w.measured_seconds < s.min + 0.05 + 1e-9


def test_a_stream_that_never_settles_ends_at_max_with_the_target_missed():
    # the target-unreachable rule would end it early (test_window_unreachable.py): off here
    s = WindowSettings(
        warmup_min=0.5, warmup_max=2, min=2, max=10, precision=0.02, stop_unreachable=False
    )
    rng = random.Random(3)
    # heavy-tailed and bursty: periods 5x slower come and go
    rates = [(20 if (i // 50) % 3 == 0 else 100) * rng.uniform(0.5, 1.5) for i in range(5000)]
    w, _ = drive(s, rates, 0.01)
    assert w.reason == "max_time"
    summary = w.summary()
    assert not summary["met"] and summary["halfwidth"] > s.precision
    assert summary["measured_s"] == pytest.approx(10.0, abs=0.011)


def test_warm_up_that_never_settles_is_capped():
    s = WindowSettings(warmup_min=0.5, warmup_max=3, min=1, max=5)
    w = Window(s)
    w.start(0.0)
    now, step = 0.0, 0.01
    while not w.measuring:
        step *= 1.1  # every step 10% slower than the one before: never settles
        now += step
        w.add_warmup([step])
        w.update(now)
    assert not w.settled and w.warmup_seconds == pytest.approx(3, abs=step + 1e-9)


def test_warm_up_ends_once_settled_after_the_minimum_time():
    s = WindowSettings(warmup_min=1.0, warmup_max=10, settle=0.05)
    durations = [0.5, 0.2, 0.1] + [0.02] * 500  # first steps pay for set-up
    w = Window(s)
    w.start(0.0)
    now = 0.0
    for d in durations:
        now += d
        w.add_warmup([d])
        w.update(now)
        if w.measuring:
            break
    assert w.settled and 1.0 <= w.warmup_seconds < 1.05


def test_slow_steps_end_at_max_with_what_they_measured():
    """A host 100x too slow for the suite's sizes: 2.5 s steps in a 30 s window."""
    s = WindowSettings(warmup_min=1, warmup_max=10, min=6, max=30, min_observations=10)
    rng = random.Random(5)
    w, _ = drive(s, [0.0008 * rng.uniform(0.85, 1.15) for _ in range(100)], 2.5)
    assert w.reason == "max_time"
    assert w.observations == 12  # 30 s of 2.5 s steps
    assert w.warmup_seconds == pytest.approx(10.0)  # capped: 4 steps cannot show settling
    assert w.summary()["observations"] == 12


def test_fewer_observations_than_wanted_is_reported_not_hidden():
    s = WindowSettings(warmup_min=0, warmup_max=1, min=1, max=5, min_observations=10)
    w, _ = drive(s, [1.0] * 10, 2.0)  # 2 s steps: 3 fit in the window
    summary = w.summary()
    assert summary["observations"] < 10 and not summary["met"]


def test_step_count_bounds_still_apply():
    s = WindowSettings(warmup_min=0, warmup_max=0, min=30, max=30, stop=25, skip=5)
    w, _ = drive(s, [100.0] * 1000, 0.01)
    assert w.reason == "stop_count" and w.observations == 25
    assert len(w.warmup_durations) == 5


def test_loop_ending_first_is_recorded():
    s = WindowSettings(warmup_min=0.1, warmup_max=1, min=5, max=10)
    w, _ = drive(s, [100.0] * 50, 0.01)
    assert not w.done
    w.finish(0.5)
    assert w.reason == "ended"
    w2, _ = drive(s, [100.0] * 3, 0.01)
    w2.finish(0.03)
    assert w2.reason == "ended_in_warmup" and w2.summary()["observations"] == 0


def test_has_settled_needs_enough_steps():
    assert not has_settled([0.1] * 5, 0.05)
    assert has_settled([0.1] * 6, 0.05)
    assert not has_settled([0.1] * 3 + [0.2] * 3, 0.05)
    # fast steps: k spans ~0.25 s, so one slow step among many does not decide
    fast = [0.001] * 600
    fast[-1] = 0.01
    assert has_settled(fast, 0.05)
