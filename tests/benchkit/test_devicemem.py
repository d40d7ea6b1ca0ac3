"""`benchkit.devicemem`: torch's peak memory of the process's device, once per process.

The figures exist only on an accelerator, which this machine lacks: here the real torch
(a CPU build, or a CUDA build without a GPU) must give nothing and write nothing, through
the reader, the writer and a real benchmark process ending early, and must not create a
CUDA context by asking. Where the record goes when the window ends (before ``stop``) is
checked with the timer's own hook. The record's path into the report is in
tests/rundata/test_decoder.py and tests/report/test_aggregate.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from benchkit import devicemem
from benchkit.channel import DataWriter
from benchkit.devicemem import (
    counters,
    device_index,
    memory_record,
    peak_memory,
    record_peak_memory,
)
from benchkit.timing import TimedIterator

from .conftest import PipeReader

ROOT = Path(__file__).resolve().parents[2]
COUNTS = {"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0}
DEVICES = ["cpu", None, "cuda", "cuda:0", 0, torch.device("cpu"), "xpu", "meta"]


@pytest.fixture(autouse=True)
def not_yet_recorded(monkeypatch):
    monkeypatch.setattr(devicemem, "_recorded", False)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_without_an_accelerator_torch_gives_nothing(device):
    assert peak_memory(device) is None
    assert not torch.cuda.is_initialized()  # asking never creates a CUDA context


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_without_an_accelerator_nothing_is_written(pipe, device):
    writer = DataWriter(pipe.write_fd, flush_interval=3600)
    assert record_peak_memory(device, writer=writer) is None
    writer.flush()
    assert pipe.records() == [] and devicemem._recorded is False


def test_counters_of_a_device_never_used_are_none():
    """``memory_stats`` of an uninitialised device is empty: no counter is invented."""
    assert counters(torch.cuda, 0) == {}
    assert counters(object(), 0) == {}  # a back-end without memory_stats


@pytest.mark.parametrize(
    ("device", "index"),
    [("cuda:1", 1), ("cuda", None), (None, None), (2, 2), (True, None),
     (torch.device("cuda", 3), 3), (torch.device("cuda"), None), ("cuda:x", None)],
    ids=str,
)  # fmt: skip
def test_the_index_of_a_device(device, index):
    assert device_index(device) == index


def test_the_record_names_its_task_and_rank():
    figures = {"device": 1, "max_allocated": 10.5, "max_reserved": 16.0, "alloc_retries": 2}
    rec = memory_record(figures, task="train", rank=3)
    assert rec["task"] == "train" and isinstance(rec["time"], float)
    assert rec["torch_memory"] == {**figures, "rank": 3}


def test_the_hook_writes_after_the_window_and_before_the_stop(pipe):
    """What `TimedIterator` writes when its window ends sits between the ``window`` record
    and the ``stop`` event (the runner ends a stopped process after a short grace)."""
    writer = DataWriter(pipe.write_fd, flush_interval=3600)
    it = TimedIterator([[0] * 4] * 50, writer=writer, monitor=False, measure=COUNTS,
                       stop=5, skip=1, interval=3600)  # fmt: skip
    assert it.meter.before_stop == it._record_memory
    it.meter.before_stop = lambda: writer.write({"task": "train", "marker": True})
    for _ in it:
        pass
    records = pipe.records()
    kinds = [next(k for k in ("window", "marker", "$event") if k in r) for r in records
             if {"window", "marker", "$event"} & r.keys()]  # fmt: skip
    assert kinds == ["window", "marker", "$event"] and records[-1]["$event"] == "stop"


def test_a_cpu_loop_that_runs_out_of_data_writes_no_torch_memory(pipe):
    it = TimedIterator([[0] * 4] * 20, writer=DataWriter(pipe.write_fd), monitor=False,
                       measure=COUNTS, device="cpu", interval=3600)  # fmt: skip
    for _ in it:
        pass
    it.close()
    records = pipe.records()
    assert any("window" in r for r in records)
    assert not [r for r in records if "torch_memory" in r]


# A benchmark as a user writes one: torch on the CPU, a window that ends early (a step
# budget), the stop raised from the loop and turned into exit 0 by `run_and_exit`.
BENCHMARK = """
import torch
from benchkit.exiting import run_and_exit
from benchkit.timing import TimedIterator

def main():
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(16, 8), torch.randn(16, 2)) for _ in range(4)]
    it = TimedIterator(data, device="cpu", on_stop="raise", stop=6, skip=2,
                       measure={"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0})
    for _ in range(100):
        for x, y in it:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            it.record_loss(loss)

if __name__ == "__main__":
    run_and_exit(main)
"""


def test_a_cpu_benchmark_stopped_early_writes_no_torch_memory(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(textwrap.dedent(BENCHMARK))
    reader = PipeReader()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BENCHKIT_", "MILABENCH_"))}
    env.update(PYTHONPATH=str(ROOT), DATA_FD=str(reader.write_fd))
    proc = subprocess.run([sys.executable, str(script)], pass_fds=[reader.write_fd], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    records = [json.loads(line) for line in reader.text().splitlines()]
    assert proc.returncode == 0, proc.stderr
    assert [r["$data"]["reason"] for r in records if r.get("$event") == "stop"] == ["stop_count"]
    assert len([r for r in records if "rate" in r]) == 6
    assert not [r for r in records if "torch_memory" in r]
