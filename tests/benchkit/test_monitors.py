"""Monitor back-ends and the background thread."""

import time

import pytest

from benchkit.channel import DataWriter
from benchkit.monitors import FakeGPUSampler, Monitor, ProcSampler, PsutilSampler, visible_devices


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


def test_visible_devices_mapping():
    assert visible_devices(4, {}) == ["0", "1", "2", "3"]
    assert visible_devices(4, {"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert visible_devices(4, {"CUDA_VISIBLE_DEVICES": "1,7,2"}) == ["1"]  # stops at invalid
    assert visible_devices(4, {"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_devices(2, {"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == ["GPU-abc"]


def test_fake_gpus_keys_as_the_process_sees_them(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    sample = FakeGPUSampler("cuda:8:40960").sample()
    assert list(sample) == ["0"]
    gpu = sample["0"]
    assert gpu["memory"][1] == 40960 and 0 <= gpu["load"] <= 1
    assert set(gpu) == {"memory", "load", "temperature", "power", "energy"}


def test_monitor_thread_writes_records(pipe, monkeypatch):
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:2")
    writer = DataWriter(pipe.write_fd, flush_interval=3600)
    with Monitor(writer, 0.02) as monitor:
        assert monitor.backends == {"gpu": "FakeGPUSampler", "host": "PsutilSampler"}
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
