"""Accelerator detection: the fake back-end (the only stand-in) and the cpu fallback."""

from __future__ import annotations

import time

import pytest

from milabench.errors import ConfigError
from milabench.monitor.accelerators import FakeAccelerators, NoAccelerators, detect


def test_cpu_machine_has_no_devices():
    accel = detect(refresh=True)
    assert accel.arch == "cpu"  # this test machine has no accelerator
    assert isinstance(accel, NoAccelerators)
    assert accel.devices() == [] and accel.sample() == {}
    assert accel.system_info()["arch"] == "cpu"


def test_fake_gpus(monkeypatch):
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:8:81920")
    accel = detect()
    assert isinstance(accel, FakeAccelerators) and accel.arch == "cuda"
    devices = accel.devices()
    assert [d["index"] for d in devices] == list(range(8))
    assert {d["product"] for d in devices} == {"Fake cuda device"}
    assert all(0 < d["memory"]["used"] < d["memory"]["total"] == 81920 for d in devices)
    first = accel.sample()
    assert set(first) == {str(i) for i in range(8)}
    for record in first.values():
        used, total = record["memory"]
        assert 0 < used < total == 81920
        assert 0 <= record["load"] <= 1
        assert 20 < record["temperature"] < 100 and record["power"] > 0
    time.sleep(0.05)
    assert accel.sample() != first  # values move like a busy device's
    assert accel.system_info()["count"] == 8


def test_fake_default_memory_and_arch(monkeypatch):
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "rocm:2")
    accel = detect()
    assert accel.arch == "rocm" and accel.devices()[0]["memory"]["total"] == 81920


def test_gpu_arch_forces(monkeypatch):
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:2")
    monkeypatch.setenv("MILABENCH_GPU_ARCH", "xpu")
    accel = detect()
    assert accel.arch == "xpu" and len(accel.devices()) == 2
    assert accel.system_info()["forced_arch"] is True


@pytest.mark.parametrize("spec", ["cuda", "tpu:2", "cuda:x", "cuda:2:0", "cuda:-1"])
def test_bad_fake_spec(monkeypatch, spec):
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", spec)
    with pytest.raises(ConfigError, match="MILABENCH_FAKE_GPUS"):
        detect()
