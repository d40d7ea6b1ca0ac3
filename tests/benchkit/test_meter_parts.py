"""The parts behind TimedIterator, each against its own contract: clock, pending steps,
rate grouping, progress, lazy losses (benchkit/clock.py, pending.py, records.py,
losses.py). The whole loop is tested in test_timing.py and test_device_events.py."""

import math

import pytest
import torch

from benchkit.clock import EventClock, HostClock
from benchkit.losses import LossBuffer
from benchkit.pending import PendingSteps
from benchkit.records import MIN_RECORD_S, RateGrouper, json_float, progress_of
from benchkit.window import Window, WindowSettings


class Event:
    """A device event that has, or has not yet, completed; counts waits and queries."""

    def __init__(self, t, completed):
        self.t, self.completed, self.waits, self.queries = t, completed, 0, 0

    def query(self):
        self.queries += 1
        return self.completed

    def synchronize(self):
        self.waits += 1
        self.completed = True

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


@pytest.mark.parametrize("done", [0, 1, 5, 9, 10])
def test_event_clock_finds_the_completed_prefix_by_querying(done):
    ends = [Event(i, i < done) for i in range(10)]
    clock = EventClock(type("Module", (), {"Event": Event}), "cuda")
    assert clock.ready(ends, 10, final=False) == done
    assert sum(e.waits for e in ends) == 0  # never waits unless final
    assert sum(e.queries for e in ends) <= 1 + math.ceil(math.log2(10))


def test_event_clock_final_waits_once_for_the_last_end():
    ends = [Event(i, False) for i in range(4)]
    clock = EventClock(type("Module", (), {"Event": Event}), "cuda")
    assert clock.ready(ends, 4, final=True) == 4
    assert [e.waits for e in ends] == [0, 0, 0, 1]
    durations, stamps = clock.durations(ends[:3], ends[1:])
    assert durations == pytest.approx([1.0, 1.0, 1.0])
    assert stamps[2] - stamps[0] == pytest.approx(2.0)


def test_host_clock_durations_and_epoch_stamps():
    clock = HostClock()
    durations, stamps = clock.durations([1.0, 2.0], [2.0, 4.5])
    assert durations == [1.0, 2.5]
    assert stamps == [2.0 + clock.epoch_offset, 4.5 + clock.epoch_offset]
    assert clock.ready([2.0, 4.5], 2, final=False) == 2


def test_pending_steps_take_oldest_first_and_move_the_head():
    pending = PendingSteps(first=10)
    for i in range(5):
        pending.starts.append(i)
        pending.ends.append(i + 1)
        pending.sizes.append(4)
    starts, ends, sizes = pending.take(2, summed=False, world_size=3)
    assert (starts, ends, sizes) == ([0, 1], [1, 2], [12.0, 12.0])  # ranks assumed equal
    assert pending.first == 12 and len(pending) == 3
    pending.summed.extend([7.0])
    assert pending.ready(HostClock(), final=False, summed_only=True) == 1
    pending.drop_summed()
    assert pending.first == 13 and len(pending) == 2 and pending.summed == []


def test_rate_grouper_groups_tiny_steps_and_keeps_the_rest_for_later():
    grouper = RateGrouper(MIN_RECORD_S)
    d = 2**-12  # 244 us (exact in binary): 5 steps make the first record over 1 ms
    rates, spans, stamps = grouper.group([2.0] * 12, [d] * 12, list(range(12)), final=False)
    assert rates == [2.0 / d, 2.0 / d] and spans == [5 * d, 5 * d] and stamps == [4, 9]
    assert grouper.partial == (4.0, 2 * d)  # two steps wait for the next call
    rates, spans, stamps = grouper.group([], [], [], final=True)
    assert rates == [2.0 / d] and spans == [2 * d] and stamps == [11]  # the end flushes them


def test_rate_grouper_without_threshold_writes_every_step_and_skips_empty_ones():
    grouper = RateGrouper(0.0)
    rates, _, _ = grouper.group([8.0, 8.0, math.nan], [0.5, 0.0, 1.0], [1.0, 2.0, 3.0], False)
    assert rates == [16.0]  # a zero-length step and a NaN size are no rate


def test_progress_of_time_window_and_count_budget():
    settings = WindowSettings(warmup_min=0, warmup_max=0, min=1, max=30)
    window = Window(settings)
    assert progress_of(settings, window, count=5, budget=0) == [0.0, 30.0]
    counts = WindowSettings(warmup_min=0, warmup_max=0, min=0, max=0)
    assert progress_of(counts, Window(counts), count=5, budget=12) == [5, 12]
    assert progress_of(counts, Window(counts), count=5, budget=0) is None


def test_json_float_is_strict_json():
    assert [json_float(x) for x in (math.nan, math.inf, -math.inf, 0.5)] == [
        '"NaN"',
        '"Infinity"',
        '"-Infinity"',
        "0.5",
    ]


def test_loss_buffer_hands_out_the_losses_of_converted_steps_in_order():
    losses = LossBuffer()
    w = torch.ones(1, requires_grad=True)
    for step in range(4):
        losses.add((w * step).sum(), step)
    assert not losses.values[0].requires_grad  # detached, not read
    times = list(losses.times)
    assert losses.take(boundary=2, final=False, on_device=False) == [([0.0, 1.0], times[:2])]
    assert losses.take(boundary=2, final=False, on_device=False) == []  # steps 2, 3 pending
    assert losses.take(boundary=0, final=True, on_device=False) == [([2.0, 3.0], times[2:])]
    losses.add("not a number", 5)
    ((values, _),) = losses.take(boundary=9, final=False, on_device=False)
    assert math.isnan(values[0])


def test_the_final_take_waits_for_each_host_copy_still_in_flight():
    """A loss copy to pinned host memory (CUDA only) is read once its event says it has
    landed: queried between steps, waited for at the end; read earlier, the buffer holds
    whatever the allocator left there."""

    class Landing(Event):
        def __init__(self, host, values):
            super().__init__(0, False)
            self.host, self.values = host, values

        def synchronize(self):
            super().synchronize()
            self.host.copy_(torch.tensor(self.values))

    losses = LossBuffer()
    first, second = torch.full((2,), -7.0), torch.full((1,), -7.0)  # not landed yet
    e1, e2 = Landing(first, [0.5, 0.25]), Landing(second, [0.125])
    losses.copies += [(e1, first, [1.0, 2.0]), (e2, second, [3.0])]
    assert losses.take(boundary=9, final=False, on_device=True) == []  # queried, not there
    assert e1.waits == 0 and e1.queries == 1 and e2.queries == 0
    assert losses.take(boundary=9, final=True, on_device=True) == [
        ([0.5, 0.25], [1.0, 2.0]), ([0.125], [3.0])]  # fmt: skip
    assert (e1.waits, e2.waits) == (1, 1) and losses.copies == []
