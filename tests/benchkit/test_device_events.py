"""The accelerator path of TimedIterator, with a stand-in for CUDA events.

NVIDIA GPUs cannot exist on this machine, so ``torch.cuda.Event`` is replaced by an
object with the same interface (``record``, ``query``, ``synchronize``, ``elapsed_time``
in ms) that reads the host clock, completes ``LAG`` seconds after it was recorded (a
device running behind the host's queue) and counts synchronisations. What is checked is
benchkit's logic: one event per step boundary, rates written while the loop runs by
*querying* events, a single synchronisation when the window ends, none inside the loop.
"""

import time

import pytest
import torch

from benchkit.channel import DataWriter
from benchkit.clock import EventClock, clock_for, device_kind
from benchkit.timing import TimedIterator

LAG = 0.05  # the device finishes a step this long after the host queued it


class FakeCudaEvent:
    syncs = 0
    created = 0
    queries = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        FakeCudaEvent.created += 1
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def query(self):
        FakeCudaEvent.queries += 1
        return time.perf_counter() >= self.t + LAG

    def synchronize(self):
        FakeCudaEvent.syncs += 1
        wait = self.t + LAG - time.perf_counter()
        if wait > 0:
            time.sleep(wait)

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


@pytest.fixture
def fake_cuda(monkeypatch):
    """``torch.cuda.Event`` is the stand-in: ``device="cuda"`` then times with it."""
    monkeypatch.setattr(torch.cuda, "Event", FakeCudaEvent)
    clock = clock_for("cuda")
    assert isinstance(clock, EventClock) and clock.Event is FakeCudaEvent


def test_device_events_synchronise_once_per_flush(pipe, fake_cuda):
    FakeCudaEvent.syncs = FakeCudaEvent.created = 0
    it = TimedIterator(
        [[0] * 16] * 30,
        device="cuda",
        stop=20,
        skip=2,
        interval=3600,
        measure={"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0},
        monitor=False,
        writer=DataWriter(pipe.write_fd, flush_interval=3600),
    )
    syncs_in_loop = []
    for _ in it:
        time.sleep(0.002)
        syncs_in_loop.append(FakeCudaEvent.syncs)
    assert set(syncs_in_loop) == {0}  # never synchronised while training
    assert FakeCudaEvent.syncs == 1  # once, at the end of the window
    # one event per step boundary (22 steps + start), and one more start per decision
    assert 23 <= FakeCudaEvent.created <= 26
    records = pipe.records()
    rates = [r for r in records if "rate" in r]
    assert len(rates) == 20
    assert all(100 < r["rate"] <= 16 / 0.002 for r in rates)
    stamps = [r["time"] for r in rates]
    assert stamps == sorted(stamps) and abs(stamps[-1] - time.time()) < 5
    assert records[-1]["$event"] == "stop"


def test_device_rates_are_written_live_without_synchronising(pipe, fake_cuda):
    """A time window on a device: completed steps reach the pipe every quarter second
    while the loop runs (queried events), so a crash mid-window keeps them."""
    FakeCudaEvent.syncs = FakeCudaEvent.created = FakeCudaEvent.queries = 0
    read_fd = pipe.read_fd
    import fcntl
    import json
    import os

    writer = DataWriter(pipe.write_fd, flush_interval=0.1)
    it = TimedIterator(
        iter(int, 1),  # endless
        device="cuda",
        batch_size=8,
        measure={
            "warmup_min": "0.2s",
            "warmup_max": "0.5s",
            "min": "1s",
            "max": "1.5s",
            "precision": 1e-9,
            "stop_unreachable": False,  # measure to max: this test is about live rates
        },
        interval=0.2,
        monitor=False,
        writer=writer,
    )
    seen_live = 0
    t0 = time.perf_counter()
    for _ in it:
        time.sleep(0.005)
        if time.perf_counter() - t0 > 1.2 and not seen_live:
            writer.flush()
            seen_live = len(
                [1 for c in pipe._chunks for line in c.splitlines() if b'"rate"' in line]
            )
            assert FakeCudaEvent.syncs == 0
    assert seen_live > 20  # rates of the completed steps were already in the pipe
    assert FakeCudaEvent.syncs == 1 and FakeCudaEvent.queries > 0
    records = pipe.records()
    window = next(r["window"] for r in records if "window" in r)
    assert window["reason"] == "max_time" and not window["met"]  # target unreachable
    rates = [r for r in records if "rate" in r]
    assert len(rates) == window["observations"]
    del read_fd, fcntl, json, os


def test_device_kind_from_arguments():
    assert device_kind("cuda:1") == "cuda"
    assert device_kind("cpu") == "cpu"
    assert device_kind(torch.device("cpu")) == "cpu"
    assert device_kind(None) == "cpu"  # torch without CUDA on this machine
