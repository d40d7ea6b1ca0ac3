"""Monitor back-ends and the background thread (the accelerator back-ends themselves:
test_accelerators.py, test_smi.py)."""

import time

import pytest

from benchkit.channel import DataWriter
from benchkit.monitors import Monitor, ProcSampler, PsutilSampler


def _burn(cpu_seconds):
    """Use this much CPU time (not wall time: the machine may be shared)."""
    end = time.process_time() + cpu_seconds
    while time.process_time() < end:
        pass


@pytest.mark.parametrize("sampler_class", [PsutilSampler, ProcSampler])
def test_host_samplers(sampler_class):
    sampler = sampler_class()
    _burn(0.2)
    cpu = sampler.cpu()
    proc = sampler.process()
    used, total = cpu["memory"]
    assert 0 < used < total and 0 <= cpu["load"] <= 100
    assert proc["memory"][0] > 1_000_000 and proc["memory"][1] == total
    assert proc["load"] > 0  # this process was busy: it shows
    import os

    assert proc["pid"] == os.getpid()


def test_proc_and_psutil_agree_on_memory_total():
    assert ProcSampler().cpu()["memory"][1] == PsutilSampler().cpu()["memory"][1]


def test_monitor_thread_writes_records(pipe, monkeypatch):
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:2")
    writer = DataWriter(pipe.write_fd, flush_interval=3600)
    with Monitor(writer, 0.02) as monitor:
        assert monitor.backends == {"gpu": "FakeAccelerators", "host": "PsutilSampler"}
        time.sleep(0.3)
    records = pipe.records()
    gpus = [r for r in records if "gpudata" in r]
    cpus = [r for r in records if "cpudata" in r]
    procs = [r for r in records if "process" in r]
    assert len(gpus) >= 3 and len(cpus) == len(gpus) == len(procs)
    assert all(r["task"] == "main" and r["time"] > 1e9 for r in records)
    assert set(gpus[0]["gpudata"]) == {"0", "1"}


def test_monitor_without_gpu_backend(monkeypatch):
    # No driver here and no fake: NVML is skipped quietly.
    monitor = Monitor(DataWriter(fd=None), 1.0)
    assert monitor.backends["gpu"] is None
    assert {k for r in monitor.sample() for k in r} == {"task", "time", "cpudata", "process"}


def test_a_lost_gpu_stops_only_the_gpu_monitor(pipe, monkeypatch):
    """The fake's ``lost@N``: the N-th sample fails like NVML's GPU_IS_LOST; the monitor
    says so once and goes on with the host."""
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:1:1000:lost@2")
    monitor = Monitor(DataWriter(pipe.write_fd, flush_interval=3600), 1.0)
    assert [k for r in monitor.sample() for k in r if k.endswith("data")] == ["gpudata", "cpudata"]
    second = monitor.sample()
    assert not any("gpudata" in r for r in second) and any("cpudata" in r for r in second)
    assert monitor.backends["gpu"] is None
    monitor.writer.flush()
    messages = [r["$data"] for r in pipe.records() if r.get("$event") == "message"]
    assert len(messages) == 1 and messages[0]["warning"] == "monitor"
    assert "GPU is lost (fake device, lost@2)" in messages[0]["message"]
