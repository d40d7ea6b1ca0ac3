"""NVIDIA (nvidia-smi), AMD (rocm-smi) and Intel (xpu-smi) command-line back-ends against
recorded outputs (tests/fakes/smi), through the parsers of `benchkit.smi` and through real
subprocesses of stand-in tools on the PATH (`benchkit.accelerators`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from benchkit.accelerators import (
    QueryToolAccelerators,
    ROCmAccelerators,
    XPUAccelerators,
    find_accelerators,
)
from benchkit.monitors import gpu_backend
from benchkit.smi import (
    parse_query,
    parse_rocm,
    parse_rocm_driver,
    parse_xpu_discovery,
    parse_xpu_dump,
)

FAKES = Path(__file__).resolve().parents[1] / "fakes"
SMI = FAKES / "smi"


@pytest.fixture
def smi_tools(monkeypatch):
    """The stand-in rocm-smi/xpu-smi first on the PATH, counters starting 10 s ago."""
    monkeypatch.setenv("PATH", f"{FAKES / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_T0", str(time.time() - 10))
    names = ("MILABENCH_FAKE_GPUS", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
    for name in (*names, "FAKE_NVIDIA_SMI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # no NVML here
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_rocm_mi300x_fields():
    cards = parse_rocm((SMI / "rocm-smi-mi300x.json").read_text())
    assert list(cards) == ["0", "1"]
    card = cards["0"]
    assert card["product"] == "AMD Instinct MI300X"  # "Card Series", not the SKU
    assert card["power"] == 612.0  # "Current Socket Graphics Package Power (W)"
    assert card["load"] == pytest.approx(0.97)
    assert card["temperature"] == 58.0  # junction: the edge sensor says N/A
    assert card["memory"] == [pytest.approx(154366164992 / 2**20), 196288.0]
    assert card["energy"] == pytest.approx(321369.7490586)  # uJ -> J


def test_rocm_older_release_and_secondary_die():
    cards = parse_rocm((SMI / "rocm-smi-mi250-rocm5.json").read_text())
    assert cards["0"]["product"] == "AMD INSTINCT MI250X"  # "Card series" (lower case)
    assert cards["0"]["power"] == 288.0  # "Average Graphics Package Power (W)"
    assert "power" not in cards["1"]  # "N/A (Secondary die)"
    assert cards["1"]["temperature"] == 39.0  # edge sensor only


def test_bad_outputs_give_nothing():
    assert parse_rocm("") == {} and parse_rocm("not json") == {} and parse_rocm("[]") == {}
    assert parse_xpu_dump("") == {} and parse_xpu_dump("no,header\n1,2") == {}
    assert parse_xpu_discovery("{") == {}
    assert parse_rocm_driver("") is None and parse_rocm_driver("{}") is None
    assert parse_query("", ("index",)) == [] and parse_query("0, 1\n", ("index",)) == []


def test_query_rows_and_rocm_driver():
    text = "0, NVIDIA H100 80GB HBM3, 412.35\n1, NVIDIA H100 80GB HBM3, [N/A]\n"
    rows = parse_query(text, ("index", "name", "power.draw"))
    assert rows[1] == {"index": "1", "name": "NVIDIA H100 80GB HBM3", "power.draw": "[N/A]"}
    driver = '{"system": {"Driver version": "6.8.5"}, "card0": {}}'
    assert parse_rocm_driver(driver) == "6.8.5"


def test_xpu_dump_and_discovery():
    found = parse_xpu_dump((SMI / "xpu-smi-dump-1.csv").read_text())
    assert found == {
        "1": {
            "load": pytest.approx(0.9887),
            "power": 547.02,
            "energy": 8790112.03,
            "memory_used": 97380.12,
        }
    }  # the N/A temperature is left out, not zero
    devices = parse_xpu_discovery((SMI / "xpu-smi-discovery.json").read_text())
    assert devices["0"] == {"product": "Intel(R) Data Center GPU Max 1550", "total_mib": 131072.0}


def test_rocm_sampler_counts_energy_and_follows_visible_devices(smi_tools, monkeypatch):
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "1")
    sampler = ROCmAccelerators.probe()
    assert sampler is not None and len(sampler.devices()) == 1
    first = sampler.sample()
    time.sleep(0.3)
    second = sampler.sample()
    assert list(first) == ["0"]  # physical card 1, as the process sees it
    assert first["0"]["power"] == 598.0 and "product" not in first["0"]
    grown = second["0"]["energy"] - first["0"]["energy"]
    assert 598.0 * 0.2 < grown < 598.0 * 5  # the counter grows with power x time


def test_xpu_sampler_one_call_per_device(smi_tools):
    sampler = XPUAccelerators.probe()
    sample = sampler.sample()
    assert set(sample) == {"0", "1"}
    assert sample["0"]["memory"] == [97412.55, 131072.0]
    assert sample["1"]["energy"] > 8790112.03  # advanced since FAKE_SMI_T0


def test_benchkit_picks_the_command_line_monitor(smi_tools, monkeypatch):
    # nvidia-smi is on the PATH too, and fails like it does without a driver: skipped
    assert isinstance(gpu_backend(), ROCmAccelerators)
    monkeypatch.setenv("MILABENCH_SMI", "0")
    assert gpu_backend() is None


def test_milabench_detects_the_same_back_end(smi_tools, monkeypatch):
    from milabench.machine.accelerators import detect

    found = detect(refresh=True)
    assert isinstance(found, ROCmAccelerators) and found.arch == "rocm"
    assert found.system_info() == {
        "arch": "rocm",
        "backend": "rocm-smi",
        "count": 2,
        "driver_version": None,  # not in the recorded output
    }
    assert [d["product"] for d in found.devices()] == ["AMD Instinct MI300X"] * 2
    assert found.devices()[0]["memory"]["total"] == 196288
    assert set(found.sample()["1"]) == {"memory", "load", "temperature", "power", "energy"}
    xpu = XPUAccelerators(str(FAKES / "bin" / "xpu-smi"))
    assert [d["product"] for d in xpu.devices()] == ["Intel(R) Data Center GPU Max 1550"] * 2
    assert xpu.sample()["0"]["energy"] > 8841237.46
    detect(refresh=True)  # leave no stand-in in the cache


def test_nvidia_smi_for_a_python_without_nvml(smi_tools, monkeypatch):
    """A node whose Python has no pynvml still tells its GPUs, driver and samples."""
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "nvidia-smi-h100.csv")
    found = find_accelerators()
    assert isinstance(found, QueryToolAccelerators) and found.arch == "cuda"
    assert [d["product"] for d in found.devices()] == ["NVIDIA H100 80GB HBM3"] * 3
    assert found.devices()[1]["memory"] == {"used": 40960, "total": 81559}
    info = found.system_info()
    assert info == {
        "arch": "cuda",
        "backend": "nvidia-smi",
        "count": 3,
        "driver_version": "550.54.15",
    }
    sample = found.sample()
    assert sample["0"] == {
        "memory": [1024.0, 81559.0],
        "load": 0.87,
        "temperature": 61.0,
        "power": 412.35,
    }
    assert "power" not in sample["1"]  # [N/A]: left out, not zero
    uuid = "GPU-5c1e0d7a-35a4-4b8e-9d3f-1a2b3c4d5e62"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuid},1,7")
    visible = find_accelerators()
    assert [d["memory"]["used"] for d in visible.devices()] == [0, 40960]  # stops at 7
    assert set(visible.sample()) == {"0", "1"}
