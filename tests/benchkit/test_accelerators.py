"""`benchkit.accelerators`: the ``MILABENCH_FAKE_GPUS`` parser (the only reader of the
variable), the fake back-end (the only stand-in), the cpu fallback, the devices as the
process sees them, and milabench's view of the same detection (`ConfigError`)."""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import pytest

from benchkit.accelerators import (
    AcceleratorSettingError,
    FakeAccelerators,
    FakeGPUSpec,
    NoAccelerators,
    fake_gpus,
    fake_gpus_setting,
    find_accelerators,
    parse_fake_gpus,
    visible_devices,
)
from milabench.errors import ConfigError
from milabench.machine.accelerators import detect

ROOT = Path(__file__).resolve().parents[2]


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
    monkeypatch.setenv("MILABENCH_GPU_ARCH", "tpu")
    with pytest.raises(ConfigError, match=r"^MILABENCH_GPU_ARCH='tpu': expected one of cuda,"):
        detect()


@pytest.mark.parametrize(
    "spec, problem",
    [
        ("cuda", "wrong number of fields"),
        ("tpu:2", "unknown arch 'tpu'"),
        ("cuda:x", "count 'x' is not a whole number"),
        ("cuda:2:0", "memory '0' is not a positive number of MiB"),
        ("cuda:-1", "count '-1' is not a whole number"),
        ("cuda:1:1000:lost", "'lost' is not lost@N"),
        ("cuda:1:2:3:4", "wrong number of fields"),
    ],
)
def test_bad_fake_spec(monkeypatch, spec, problem):
    """One behaviour everywhere: the variable, the value, what is wrong, the form."""
    expected = (
        f"MILABENCH_FAKE_GPUS={spec!r}: {problem}; expected <arch>:<count>[:<MiB>[:lost@N]] "
        "with arch one of cuda, rocm, xpu, hpu, cpu"
    )
    with pytest.raises(AcceleratorSettingError) as raised:
        parse_fake_gpus(spec)
    assert str(raised.value) == expected
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", spec)
    with pytest.raises(ConfigError) as as_config:
        detect()  # milabench: a configuration error (exit 2), same line
    assert str(as_config.value) == expected
    with pytest.raises(AcceleratorSettingError):
        find_accelerators()  # benchkit's monitor: the same error


def test_fake_spec_fields():
    assert parse_fake_gpus("cuda:8") == FakeGPUSpec("cuda", 8, 81920, 0)
    assert parse_fake_gpus(" rocm:2:1024 ") == FakeGPUSpec("rocm", 2, 1024, 0)
    assert parse_fake_gpus("cuda:1:1000:lost@3") == FakeGPUSpec("cuda", 1, 1000, 3)
    assert parse_fake_gpus("cuda:1::lost@3").memory_mib == 81920  # empty MiB: the default
    assert parse_fake_gpus("cpu:0").count == 0
    assert fake_gpus({}) is None and fake_gpus({"MILABENCH_FAKE_GPUS": ""}) is None
    assert fake_gpus({"MILABENCH_FAKE_GPUS": "xpu:4"}) == FakeGPUSpec("xpu", 4)


def test_a_lost_fake_gpu_fails_its_nth_sample():
    accel = FakeAccelerators.from_spec(parse_fake_gpus("cuda:1:1000:lost@3"))
    assert set(accel.sample()) == {"0"} and accel.sample()["0"]["memory"][1] == 1000
    with pytest.raises(RuntimeError, match=r"GPU is lost \(fake device, lost@3\)"):
        accel.sample()


def test_visible_devices_mapping():
    assert visible_devices(4, {}) == ["0", "1", "2", "3"]
    assert visible_devices(4, {"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert visible_devices(4, {"CUDA_VISIBLE_DEVICES": "1,7,2"}) == ["1"]  # stops at invalid
    assert visible_devices(4, {"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_devices(2, {"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == ["GPU-abc"]


def test_fake_gpus_keys_as_the_process_sees_them(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    accel = FakeAccelerators.from_spec(parse_fake_gpus("cuda:8:40960"))
    sample = accel.sample()
    assert list(sample) == ["0"] and len(accel.devices()) == 1
    gpu = sample["0"]
    assert gpu["memory"][1] == 40960 and 0 <= gpu["load"] <= 1
    assert set(gpu) == {"memory", "load", "temperature", "power", "energy"}


def _sources() -> list[Path]:
    folders = ("milabench", "benchkit", "benchmarks", "scripts")
    return [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))]


def test_a_launcher_s_fake_gpus_setting_is_what_fake_gpus_reads():
    """A child environment made by `fake_gpus_setting` shows exactly its devices."""
    for spec in (FakeGPUSpec("cuda", 1, 143771), FakeGPUSpec("rocm", 8, 1000, 3)):
        assert fake_gpus(fake_gpus_setting(spec)) == spec


def test_fake_gpus_is_read_in_one_module_only():
    """``MILABENCH_FAKE_GPUS`` is read from the environment by `fake_gpus` alone: no other
    module (nor program text sent to a node) reads it, by name or through a constant."""
    read = re.compile(r"(environ|getenv|\benv\b)[^\n]*MILABENCH_FAKE_GPUS")
    readers, named = set(), set()
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        if read.search(text):
            readers.add(path.relative_to(ROOT).as_posix())
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Constant) and node.value == "MILABENCH_FAKE_GPUS":
                named.add(path.relative_to(ROOT).as_posix())
    assert readers == {"benchkit/accelerators.py"}
    assert named <= {"benchkit/accelerators.py"}
