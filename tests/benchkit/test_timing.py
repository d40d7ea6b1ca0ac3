"""TimedIterator records, budget, progress, lazy losses."""

import math
import time

import pytest
import torch

import benchkit
from benchkit.channel import DataWriter
from benchkit.timing import TimedIterator, default_batch_size


class Loader:
    """A re-iterable loader that counts how many epochs were started."""

    def __init__(self, n, batch=4):
        self.n, self.batch, self.epochs = n, batch, 0
        self.sampler = "the-sampler"

    def __iter__(self):
        self.epochs += 1
        for _ in range(self.n):
            yield [0] * self.batch

    def __len__(self):
        return self.n


def rates(records, task="train"):
    return [r for r in records if r.get("task") == task and "rate" in r]


# Step counts only (no time window): what these tests check is the bookkeeping, exactly.
COUNTS = {"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0}


def make(pipe, loader, **kw):
    kw.setdefault("monitor", False)
    kw.setdefault("measure", COUNTS)
    return TimedIterator(loader, writer=DataWriter(pipe.write_fd, flush_interval=3600), **kw)


def test_budget_ends_iteration_and_writes_stop(pipe):
    loader = Loader(100, batch=8)
    it = make(pipe, loader, stop=10, skip=3, interval=3600)
    seen = 0
    for _ in it:
        time.sleep(0.002)
        seen += 1
    assert it.done and it.count == 13 and seen == 13
    assert list(it) == []  # a spent iterator yields nothing more
    records = pipe.records()
    rs = rates(records)
    assert len(rs) == 10  # the 3 warm-up observations are not reported
    for r in rs:
        assert r["units"] == "items/s"
        # 8 items in ~2 ms: clearly in the thousands, not skewed by bookkeeping
        assert 50 < r["rate"] <= 4000
        assert abs(r["time"] - time.time()) < 60
    assert [r["time"] for r in rs] == sorted(r["time"] for r in rs)
    stop = [r for r in records if r.get("$event") == "stop"]
    assert stop == [
        {
            "$event": "stop",
            "$data": {
                "reason": "stop_count",
                "observations": 10,
                "warmup_observations": 3,
                "stop": 10,
                "skip": 3,
                "task": "train",
            },
        }
    ]
    assert records.index(stop[0]) == len(records) - 1
    progress = [r["progress"] for r in records if r.get("task") == "early_stop"]
    assert progress[0] == [0, 13] and progress[-1] == [13, 13]
    window = [r["window"] for r in records if "window" in r]
    assert len(window) == 1 and window[0]["observations"] == 10
    assert window[0]["warmup_observations"] == 3 and window[0]["reason"] == "stop_count"


def test_budget_spans_epochs_and_epoch_loop_exits(pipe):
    loader = Loader(4)
    it = make(pipe, loader, stop=7, skip=2, interval=3600)
    epochs = 0
    for _ in range(50):
        epochs += 1
        for _ in it:
            pass
        if it.done:
            break
    assert epochs == 3 and loader.epochs == 3 and it.count == 9
    assert len(rates(pipe.records())) == 7


def test_first_batch_is_fetched_outside_timed_region(pipe):
    class SlowStart:
        def __iter__(self):
            time.sleep(0.2)  # creating the iterator / first batch is slow
            for _ in range(5):
                yield [1, 2]

    it = make(pipe, SlowStart(), stop=0, skip=0)
    for _ in it:
        time.sleep(0.001)
    it.close()
    rs = rates(pipe.records())
    assert len(rs) == 5
    assert all(r["rate"] > 2 / 0.1 for r in rs)  # no interval contains the 0.2 s start


def test_epoch_end_flushes_without_budget(pipe):
    it = make(pipe, Loader(6, batch=3), stop=0, skip=1)
    for _ in it:
        pass
    writer = it.writer
    writer.flush()
    records = pipe.records()
    assert len(rates(records)) == 5 and not it.done
    assert not [r for r in records if "$event" in r]  # no budget: no stop event


def test_lazy_losses_are_tensors_until_flush_and_nan_is_kept(pipe):
    it = make(pipe, Loader(5), stop=0, skip=0)
    w = torch.ones(1, requires_grad=True)
    for i, _ in enumerate(it):
        loss = (w * float(i)).sum() if i != 2 else (w * math.nan).sum()
        it.record_loss(loss)
        if i == 0:
            stored = it.meter.losses.values[0]
            assert isinstance(stored, torch.Tensor) and not stored.requires_grad
    it.close()
    losses = [r["loss"] for r in pipe.records() if "loss" in r]
    assert losses[:2] == [0.0, 1.0] and losses[3:] == [3.0, 4.0]
    assert losses[2] == "NaN"  # written as strict JSON; the report reads it as NaN


def test_plain_float_losses(pipe):
    it = make(pipe, Loader(3), stop=0, skip=0)
    for _ in it:
        it.record_loss(0.5)
    it.close()
    assert [r["loss"] for r in pipe.records() if "loss" in r] == [0.5, 0.5, 0.5]


def test_batch_size_callable_and_units(pipe):
    batches = [{"input_ids": [[0] * 128] * 2}] * 6
    it = make(
        pipe,
        batches,
        stop=3,
        skip=1,
        units="Tok/s",
        batch_size=lambda b: sum(len(row) for row in b["input_ids"]),
    )
    for _ in it:
        time.sleep(0.002)
    rs = rates(pipe.records())
    assert len(rs) == 3 and {r["units"] for r in rs} == {"Tok/s"}
    assert all(1000 < r["rate"] <= 256 / 0.002 for r in rs)


def test_constant_batch_size(pipe):
    it = make(pipe, range(5), stop=0, skip=0, batch_size=32)
    for _ in it:
        time.sleep(0.001)
    it.close()
    assert all(r["rate"] < 32 / 0.001 + 1 for r in rates(pipe.records()))


def test_default_batch_size_shapes():
    x = torch.zeros(16, 3)
    assert default_batch_size(x) == 16
    assert default_batch_size((x, torch.zeros(16))) == 16
    assert default_batch_size({"input_ids": torch.zeros(8, 4)}) == 8
    assert default_batch_size([1, 2, 3]) == 3


def test_progress_is_throttled(pipe):
    it = make(pipe, Loader(2000), stop=1500, skip=0, interval=0.05)
    for _ in it:
        pass
    progress = [r for r in pipe.records() if r.get("task") == "early_stop"]
    assert 2 <= len(progress) < 50  # not one per step


def test_on_stop_raise_with_run_main(pipe):
    it = make(pipe, Loader(10), stop=2, skip=0, on_stop="raise")

    def main():
        for _ in range(100):
            for _ in it:
                pass
        return "not reached"

    with pytest.raises(SystemExit) as info:
        benchkit.run_main(main)
    assert info.value.code == 0
    assert len(rates(pipe.records())) == 2


def test_budget_context_swallows_only_the_stop(pipe):
    it = make(pipe, Loader(10), stop=2, skip=0, on_stop="raise")
    with benchkit.budget():
        for _ in it:
            pass
        pytest.fail("the stop should have left the block")
    with pytest.raises(KeyError):
        with benchkit.budget():
            raise KeyError("other errors pass through")


def test_stop_program_is_not_an_exception():
    # A benchmark's `except Exception` must not swallow the stop.
    assert not issubclass(benchkit.StopProgram, Exception)


def test_breaking_out_flushes_what_was_measured(pipe):
    it = make(pipe, Loader(50), stop=0, skip=0)
    for i, _ in enumerate(it):
        if i == 10:
            break
    it.writer.flush()
    assert len(rates(pipe.records())) == 10


def test_loader_attributes_pass_through():
    it = TimedIterator(Loader(7), writer=DataWriter(fd=None), monitor=False)
    assert len(it) == 7 and it.sampler == "the-sampler"


def test_options_come_from_the_entry(pipe, monkeypatch):
    monkeypatch.setenv("MILABENCH_CONFIG", '{"voir": {"options": {"stop": 4, "skip": 1}}}')
    it = make(pipe, Loader(100))
    assert (it.stop, it.skip, it.budget) == (4, 1, 5)


def test_only_rank_zero_writes(pipe, monkeypatch):
    it = TimedIterator(
        Loader(5),
        rank=1,
        world_size=2,
        writer=DataWriter(pipe.write_fd),
        monitor=False,
        stop=2,
        skip=0,
        measure=COUNTS,
    )
    for _ in it:
        pass
    assert it.done and it.writer is None
    assert pipe.records() == []


def test_monitor_started_by_the_iterator(pipe):
    it = make(pipe, Loader(30), stop=25, skip=0, monitor=None, interval=3600)
    it.gpu_poll = 0.02
    for _ in it:
        time.sleep(0.005)
    kinds = {k for r in pipe.records() for k in ("cpudata", "process") if k in r}
    assert kinds == {"cpudata", "process"}


def test_per_step_cost_sanity():
    """Generous bound only (the harness measures): the target is 5 us/step."""
    n = 100_000
    it = TimedIterator(
        range(n), batch_size=1, stop=0, skip=0, writer=DataWriter(fd=None), monitor=False
    )
    t0 = time.perf_counter()
    for _ in it:
        pass
    per_step = (time.perf_counter() - t0) / n
    assert per_step < 50e-6


@pytest.mark.parametrize("interval,max_pending", [(0.0, 10_000), (3600, 7), (0.001, 5)])
def test_intermediate_flushes_lose_nothing(pipe, interval, max_pending):
    """Live flushes (each tick on CPU, or every max_pending steps) keep every observation."""
    it = make(pipe, Loader(40), stop=50, skip=3, interval=interval, max_pending=max_pending)
    for _ in range(10):
        for _ in it:
            time.sleep(0.0005)
        if it.done:
            break
    records = pipe.records()
    rs = rates(records)
    assert len(rs) == 50
    assert [r["time"] for r in rs] == sorted(r["time"] for r in rs)
    assert len(set(r["time"] for r in rs)) == 50  # no observation reported twice


def test_a_script_that_just_ends_still_gets_its_window_summary(tmp_path):
    """No close(), no budget reached: the loop ran out and the interpreter exits. The
    summary (reason ``ended``) is written at exit, and the iterator is not kept alive
    by the exit hook meanwhile."""
    import gc
    import json
    import os
    import subprocess
    import sys
    import textwrap
    import weakref

    from benchkit import timing

    it = TimedIterator(range(3), writer=DataWriter(fd=None), monitor=False)
    ref = weakref.ref(it)
    del it
    gc.collect()
    assert ref() is None  # the exit hook holds weak references only

    script = tmp_path / "ends.py"
    script.write_text(
        textwrap.dedent(
            """
            import time
            from benchkit.timing import TimedIterator
            it = TimedIterator(range(200), batch_size=1, measure={"warmup_min": 0, "warmup_max": "0.05s",
                               "min": "5s", "max": "10s"}, monitor=False)
            for _ in it:
                time.sleep(0.005)
            """
        )
    )
    out = tmp_path / "data"
    with open(out, "w") as fh:
        env = dict(
            os.environ,
            DATA_FD=str(fh.fileno()),
            PYTHONPATH=str(timing.__file__).rsplit("/benchkit/", 1)[0],
        )
        env.pop("MILABENCH_CONFIG", None)
        subprocess.run(
            [sys.executable, str(script)], env=env, pass_fds=[fh.fileno()], check=True, timeout=60
        )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    window = [r["window"] for r in records if "window" in r]
    assert len(window) == 1 and window[0]["reason"] == "ended"
    assert window[0]["observations"] == len([r for r in records if "rate" in r]) > 20


def test_tiny_steps_under_a_time_window_are_grouped_into_records_of_a_millisecond(pipe):
    """A loop of microsecond steps measured for a second must not write a record per
    step (30 s of such a loop would be tens of millions of lines): steps are grouped
    into records of at least 1 ms, and the rate of a group is its items over its time."""
    from benchkit.records import MIN_RECORD_S

    it = make(
        pipe,
        iter(int, 1),  # endless, each step ~1 us
        batch_size=4,
        measure={"warmup_min": "0.1s", "warmup_max": "0.2s", "min": "1s", "max": "1s"},
    )
    steps = 0
    for _ in it:
        steps += 1
    records = pipe.records()
    rs = rates(records)
    window = next(r["window"] for r in records if "window" in r)
    measured = steps - window["warmup_observations"]
    assert steps > 50_000  # tiny steps indeed
    assert len(rs) == window["observations"] <= 1.2 / MIN_RECORD_S  # ~1 ms records
    assert len(rs) < measured / 20
    # grouped rates are still items per second of the loop: 4 items per ~1-5 us step (a
    # record during which the process waited for a CPU is slower: the median is checked)
    assert all(0 < r["rate"] < 4 / 0.1e-6 for r in rs)
    assert 4 / 50e-6 < sorted(r["rate"] for r in rs)[len(rs) // 2]
    assert window["reason"] == "max_time" and 0.99 <= window["measured_s"] < 1.5
