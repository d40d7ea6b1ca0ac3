"""The target-unreachable rule of the measurement window (`Window.unreachable`), on
synthetic streams driven with a simulated clock: it ends a window whose interval has
stopped shrinking and cannot reach the target by `max`, and never one that averages out.
The thresholds themselves are judged on recorded streams (scripts/window_replay.py,
docs/measurement.md)."""

from __future__ import annotations

import math
import random

import pytest

from benchkit.options import parse_measure
from benchkit.window import Window, WindowSettings


def drive(settings: WindowSettings, rates, step_s: float, decide_every: float = 0.25):
    """Measured steps of ``step_s`` each, decisions every ``decide_every`` s (as the
    iterator makes them); warm-up skipped."""
    w = Window(settings)
    w.start(0.0)
    w.begin_measure(0.0)
    now = 0.0
    pending: list[float] = []
    next_decision = decide_every
    for rate in rates:
        now += step_s
        pending.append(rate)
        if now >= next_decision:
            w.add_measured([step_s] * len(pending), pending)
            pending = []
            w.update(now)
            next_decision += decide_every
            if w.done:
                break
    return w


def test_an_interval_that_stopped_shrinking_ends_the_window_early():
    """A host that keeps slowing down for seconds at a time: the interval is as wide at
    16 s as at 8 s, so 30 s cannot bring it to ±2%."""
    s = WindowSettings(min=6, max=30, precision=0.02)
    rng = random.Random(5)
    # 0.5x for 1.5 s every 4 s, plus 3% step noise
    rates = [(50 if (i * 0.01) % 4.0 < 1.5 else 100) * rng.gauss(1, 0.03) for i in range(3000)]
    w = drive(s, rates, 0.01)
    assert w.reason == "unreachable"
    assert s.min <= w.measured_seconds < s.max
    detail = w.summary()["unreachable"]
    assert detail["earlier_s"] <= detail["at_s"] / 2 + 1e-9
    assert detail["exponent"] < w.stalled_exponent
    assert detail["projected_halfwidth"] > w.unreachable_margin * s.precision
    assert w.summary()["met"] is False and w.summary()["reason"] == "unreachable"


def test_noise_that_averages_out_is_never_stopped():
    """Independent step noise of 20%: the interval shrinks as t^-1/2 and reaches ±2%."""
    s = WindowSettings(min=6, max=30, precision=0.02)
    for seed in range(20):
        rng = random.Random(seed)
        w = drive(s, [rng.gauss(100, 20) for _ in range(60_000)], 0.005)
        assert w.reason == "precision", seed


def test_a_slow_interval_that_still_shrinks_is_not_stopped():
    """Wide at the start but shrinking as it should (correlated, not stalled): measured on
    to the end even when the target is missed there: the rule needs both conditions."""
    s = WindowSettings(min=6, max=30, precision=0.005)
    rng = random.Random(11)
    w = drive(s, [rng.gauss(100, 30) for _ in range(30_000)], 0.001)
    assert w.reason in ("precision", "max_time")
    assert w.unreachable_detail is None


def test_the_rule_can_be_turned_off_per_entry():
    s = WindowSettings(min=6, max=30, precision=0.02, stop_unreachable=False)
    rng = random.Random(5)
    rates = [(50 if (i * 0.01) % 4.0 < 1.5 else 100) * rng.gauss(1, 0.03) for i in range(3000)]
    assert drive(s, rates, 0.01).reason == "max_time"
    assert parse_measure({"stop_unreachable": False}).stop_unreachable is False
    assert parse_measure({"stop_unreachable": "yes"}).stop_unreachable is True
    assert parse_measure({}).stop_unreachable is True
    with pytest.raises(ValueError, match=r"measure.stop_unreachable must be true or false"):
        parse_measure({"stop_unreachable": "sometimes"})


def test_no_decision_before_min_nor_without_an_earlier_interval():
    s = WindowSettings(min=6, max=30, precision=0.02)
    w = Window(s)
    w.start(0.0)
    w.begin_measure(0.0)
    w.history = []
    assert not w.unreachable(8.0, 0.5)  # nothing recorded at 4 s or before
    w.history = [(4.0, 0.5, 100)]
    assert w.unreachable(8.0, 0.5)  # same width after twice the time: stalled
    w.unreachable_detail = None
    assert not w.unreachable(8.0, 0.5 * math.sqrt(0.5))  # shrank as noise averaging does
    assert not w.unreachable(30.0, 0.5)  # at max it is max_time's decision
