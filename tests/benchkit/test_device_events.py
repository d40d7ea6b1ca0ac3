"""The accelerator path of TimedIterator, with a stand-in for CUDA events.

NVIDIA GPUs cannot exist on this machine, so ``torch.cuda.Event`` is replaced by an
object with the same interface (``record``, ``synchronize``, ``elapsed_time`` in ms) that
reads the host clock and counts synchronisations. What is checked is benchkit's logic:
one event per step boundary, a single synchronisation per flush, none inside the loop.
"""

import time

from benchkit.channel import DataWriter
from benchkit.timing import TimedIterator, _EventClock


class FakeCudaEvent:
    syncs = 0
    created = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        FakeCudaEvent.created += 1
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        FakeCudaEvent.syncs += 1

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


class FakeCudaModule:
    Event = FakeCudaEvent


def test_device_events_synchronise_once_per_flush(pipe):
    FakeCudaEvent.syncs = FakeCudaEvent.created = 0
    it = TimedIterator(
        [[0] * 16] * 30,
        stop=20,
        skip=2,
        interval=3600,
        monitor=False,
        writer=DataWriter(pipe.write_fd, flush_interval=3600),
    )
    it._clock = _EventClock(FakeCudaModule, "cuda")
    syncs_in_loop = []
    for _ in it:
        time.sleep(0.002)
        syncs_in_loop.append(FakeCudaEvent.syncs)
    assert set(syncs_in_loop) == {0}  # never synchronised while training
    assert FakeCudaEvent.syncs == 1  # once, at the budget's flush
    assert FakeCudaEvent.created == 23  # one event per step boundary (22 steps + start)
    records = pipe.records()
    rates = [r for r in records if "rate" in r]
    assert len(rates) == 20
    assert all(100 < r["rate"] <= 16 / 0.002 for r in rates)
    stamps = [r["time"] for r in rates]
    assert stamps == sorted(stamps) and abs(stamps[-1] - time.time()) < 5
    assert records[-1]["$event"] == "stop"


def test_device_kind_from_arguments():
    from benchkit.timing import _device_kind

    assert _device_kind("cuda:1") == "cuda"
    assert _device_kind("cpu") == "cpu"
    import torch

    assert _device_kind(torch.device("cpu")) == "cpu"
    assert _device_kind(None) == "cpu"  # torch without CUDA on this machine
