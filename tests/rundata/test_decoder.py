"""One decoder: the report's reader and the live dashboard see the same run.

A benchmark's records are written by benchkit's real writers into a real data channel
(a file descriptor), decoded by the runner's channel reader and fanned out, as during a
run, to both sinks at once: the run files (`RunFileSink`) and the plain dashboard. The
folder is then read back by the report's reader; what the dashboard showed (rates,
loss, early stop, status and its reason, warm-up, window, memory, what it ignored) must
be what the report reads.
"""

from __future__ import annotations

import io
import math
import os
import time
from pathlib import Path

import pytest

from benchkit import golden
from benchkit.channel import DataWriter
from benchkit.devicemem import memory_record
from benchkit.flops import declare_flops
from benchkit.records import Records
from benchshared.inputs import inputs_record
from milabench.execute.memory import TreeSampler
from milabench.execute.runner import _Channel, _Emitter
from milabench.rundata.outcome import SUCCESS, failure_detail, file_status
from milabench.rundata.reader import read_run_dir
from milabench.rundata.records import Decoder, Progress, Rate, TorchMemory
from milabench.sinks.dashboard import PlainDashboard
from milabench.sinks.runfiles import RunFileSink


class Benchmark:
    """One process's side: benchkit's writers on a real descriptor, read back as lines."""

    def __init__(self, folder: Path, tag: str) -> None:
        self.path = folder / f"{tag}.channel"
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.writer = DataWriter(self.fd, batch=1_000_000, flush_interval=3600)
        self.records = Records(self.writer, "train", "items/s", time.time() - time.perf_counter())

    def lines(self) -> list[str]:
        self.writer.flush()
        os.close(self.fd)
        return self.path.read_text().splitlines()


def run_process(sinks: list, folder: Path, tag: str, config: dict, write, end: dict) -> None:
    """The runner's events of one process around what ``write(benchmark)`` sent."""
    emit = _Emitter(tag, sinks)
    emit("config", config)
    emit("start", {"command": ["python", "main.py"], "time": time.time()})
    bench = Benchmark(folder, tag)
    write(bench)
    _Channel(emit).feed(bench.lines())
    sampler = TreeSampler(os.getpid())
    sampler.sample()
    emit("data", sampler.record(), "data")
    emit("end", {"command": ["python", "main.py"], "time": time.time(), **end})


def rates(bench: Benchmark, values: list[float]) -> None:
    now = time.time()
    bench.records.rates(values, [now + i * 0.01 for i in range(len(values))])


# torch's figures on a GPU (`benchkit.devicemem.peak_memory`), MiB
TORCH_PEAKS = {"device": 0, "max_allocated": 1500.5, "max_reserved": 2048.0, "alloc_retries": 1,
               "ooms": 0}  # fmt: skip


def healthy(bench: Benchmark) -> None:
    w = bench.writer
    declare_flops(1.5e9, precision="bf16", source="counted", writer=w)
    w.write(inputs_record("ok", {"weights": None}, "random weights"))
    w.write(golden.record(golden.result("matmul", "fp32", 1e-7)))
    w.write({"task": "main", "time": time.time(), "gpudata": {"0": {"load": 0.5}}})
    w.write({"task": "main", "time": time.time(), "cpudata": {"load": 37.5}})
    w.write({"task": "train", "warmup": {"seconds": 1.0, "observations": 3}, "time": 1.0})
    rates(bench, [800.0, 810.0, 805.0, 812.0])
    bench.records.losses([2.5, 2.25], [time.perf_counter()] * 2)
    bench.records.progress([30.0, 30.0])
    w.write({"task": "train", "window": {"mean": 807.0, "met": True}, "time": 2.0})
    w.write(memory_record(TORCH_PEAKS, task="train", rank=0))  # what a GPU process writes
    w.write({"task": "train", "mystery": {"a": 1}})  # a record kind nobody knows
    w.event("mystery", {"b": 2})  # an event nobody knows
    w.event("stop", {"reason": "window"})


def nan_loss(bench: Benchmark) -> None:
    rates(bench, [10.0, 11.0])
    bench.records.losses([1.0, math.nan], [time.perf_counter()] * 2)


def short_of_budget(bench: Benchmark) -> None:
    rates(bench, [5.0, 6.0])
    bench.records.progress([2.3, 2.5])  # 2 >= 2 in whole steps, not in seconds


def too_few(bench: Benchmark) -> None:
    rates(bench, [1.0, 2.0, 3.0])


def skipped(bench: Benchmark) -> None:
    bench.writer.event("message", {"message": "skipped: no GPU", "skipped": "capability"})


CASES = {
    # tag: (writer, measure block, end of the process, status the report gives)
    "ok.D0": (healthy, {}, {"return_code": -15, "early_stop": True}, SUCCESS),
    "nan.D0": (nan_loss, {}, {"return_code": 0}, "failed"),
    "frac.D0": (short_of_budget, {}, {"return_code": -15}, "failed"),
    "few.D0": (too_few, {"required_observations": "5"}, {"return_code": 0}, "failed"),
    "skip": (skipped, {}, {"return_code": "SKIPPED"}, "skipped"),
}


@pytest.fixture(scope="module")
def both_views(tmp_path_factory):
    """The run folder read by the report's reader, and the dashboard that saw it live."""
    folder = tmp_path_factory.mktemp("run")
    channels = tmp_path_factory.mktemp("channels")
    files, out = RunFileSink(folder), io.StringIO()
    dashboard = PlainDashboard(out, rate_every=0.0)
    for tag, (write, measure, end, _) in CASES.items():
        config = {"name": tag.split(".")[0], "measure": measure}
        run_process([files, dashboard], channels, tag, config, write, end)
    files.close()
    read = {fr.tag: fr for fr in read_run_dir(folder)}
    shown = {row.tag: row for row in dashboard.state.finished}
    return read, shown, dashboard, out.getvalue()


@pytest.mark.parametrize("tag", list(CASES))
def test_report_and_dashboard_read_the_same_facts(both_views, tag):
    read, shown, _, _ = both_views
    fr, row = read[tag], shown[tag]
    assert row.observations == len(fr.rates)
    assert row.rate == (fr.rates[-1] if fr.rates else None)
    assert row.units == (fr.units or "")
    if fr.losses:
        assert row.loss == pytest.approx(fr.losses[-1], nan_ok=True)
    else:
        assert row.loss is None
    assert row.nan_loss == fr.nan_loss
    assert row.early_stop == fr.early_stop
    assert row.skipped == fr.skipped
    assert row.warmup == fr.warmup and row.window == fr.window
    assert row.peak_rss == fr.peak_rss and row.peak_rss > 0
    assert row.required == (5 if tag == "few.D0" else 1)
    status = file_status(fr)
    assert status == CASES[tag][3]
    assert row.status == ("done" if status == SUCCESS else status)
    assert row.detail == failure_detail(fr, status)


def test_the_rule_each_case_exercises(both_views):
    read, shown, _, text = both_views
    ok = read["ok.D0"]
    assert ok.early_stop and ok.rates == [800.0, 810.0, 805.0, 812.0]
    assert ok.flops == {"flops_per_item": 1.5e9, "precision": "bf16", "flops_source": "counted"}
    assert ok.inputs["missing"] == ["weights"] and ok.golden[0]["passed"] is True
    assert [d for _, d in ok.gpudata] == [{"0": {"load": 0.5}}]
    assert ok.torch_memory == [{**TORCH_PEAKS, "rank": 0}]
    assert all(not fr.torch_memory for tag, fr in read.items() if tag != "ok.D0")
    assert shown["ok.D0"].gpu["load"] == 0.5
    assert shown["nan.D0"].detail == "NaN loss"
    # progress 2.3 of 2.5 s: the budget is not spent, so the -15 is a kill, not a stop
    assert not read["frac.D0"].early_stop
    assert shown["frac.D0"].detail == "exit code -15"
    assert shown["few.D0"].detail == "3 observation(s), fewer than the 5 required"
    assert read["skip"].skip_reason == "skipped: capability (no GPU)"
    assert "[ok.D0] end: done (return code -15)" in text
    assert "[frac.D0] end: failed (exit code -15) (return code -15)" in text
    assert "[ok.D0] window: 807 items/s" in text


def test_an_unknown_kind_is_ignored_and_counted_alike(both_views):
    read, _, dashboard, text = both_views
    assert read["ok.D0"].unknown == {"data:mystery,task": 1, "mystery": 1}
    assert all(not fr.unknown for tag, fr in read.items() if tag != "ok.D0")
    assert dict(dashboard.state.decoder.unknown) == read["ok.D0"].unknown
    assert "mystery" not in text


def test_decoder_values():
    """One record may hold several kinds; a value that is not a number gives nothing."""
    decoder = Decoder()
    items = decoder.record({"task": "train", "rate": 5, "loss": "NaN", "units": "items/s"})
    assert items[0] == Rate("train", 5.0, "items/s", None) and math.isnan(items[1].value)
    assert decoder.record({"task": "train", "rate": "fast"}) == ()
    (progress,) = decoder.record({"task": "early_stop", "progress": [3, 3]})
    assert progress == Progress("early_stop", 3.0, 3.0, None) and progress.stops
    assert not Progress("early_stop", 3.0, 0.0, None).stops
    assert not Progress("train", 3.0, 3.0, None).stops
    assert decoder.event({"event": "line", "data": 5, "pipe": "stdout"}) == ()
    assert not decoder.unknown


def test_torch_memory_values_are_checked():
    """A ``torch_memory`` record gives its figures when a peak is a number; a counter
    that is not a whole count, or a peak that is negative or NaN, is left out."""
    decoder = Decoder()
    (found,) = decoder.record({"task": "train", "time": 5.0, "torch_memory": {
        "device": 1, "rank": 1, "max_allocated": 10, "max_reserved": "NaN",
        "alloc_retries": 2.5, "ooms": 3}})  # fmt: skip
    assert found == TorchMemory(10.0, None, None, 3, 1, 1, 5.0)
    assert decoder.record({"task": "train", "torch_memory": {"max_allocated": -1}}) == ()
    assert decoder.record({"task": "train", "torch_memory": "big"}) == ()
    assert not decoder.unknown  # a known kind, even when its values do not parse
