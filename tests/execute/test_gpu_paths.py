"""GPU-path correctness that can be checked without a GPU: collective
backend names torch accepts, device selection through an inherited restriction (indexes,
GPU and MIG UUIDs), PCI bus order, and the NVML back-end against a fake `pynvml` that has
the real module's interface (checked against the installed nvidia-ml-py)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import fakenvml
import pytest

from milabench.config.entry import Entry
from milabench.config.placeholders import CCL, placeholder_values
from milabench.plan.environment import benchmark_env, inherited_devices, selection_value
from milabench.plan.tree import PerGPU, Script

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def test_every_collective_backend_name_is_one_torch_accepts():
    dist = pytest.importorskip("torch.distributed")
    for arch in ("cuda", "rocm", "xpu", "cpu"):
        name = placeholder_values(Entry(name="b"), {"arch": arch})["ccl"]
        assert name == CCL[arch]
        assert name in dist.Backend.backend_list, (arch, name)
    # ROCm's RCCL is used through torch's "nccl" backend; "rccl" is not a torch name
    assert CCL["rocm"] == "nccl" and CCL["xpu"] == "xccl"


def test_selection_goes_through_the_inherited_restriction():
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert inherited_devices("cuda", env) == ["2", "3"]
    assert selection_value("cuda", [0], env) == "2"
    assert selection_value("cuda", [0, 1], env) == "2,3"
    assert selection_value("cuda", [1], {}) == "1"  # nothing inherited: the index itself
    mig = {"CUDA_VISIBLE_DEVICES": "MIG-aaaa-1,MIG-bbbb-2"}
    assert selection_value("cuda", [1], mig) == "MIG-bbbb-2"
    assert selection_value("rocm", [0], {"ROCR_VISIBLE_DEVICES": "5"}) == "5"
    xpu = {"ONEAPI_DEVICE_SELECTOR": "level_zero:3,4"}
    assert selection_value("xpu", [1], xpu) == "level_zero:4"
    assert inherited_devices("cpu", env) is None


def test_per_gpu_plan_runs_on_the_gpus_milabench_was_given(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")
    system = {"arch": "cuda", "gpu": {"count": 2}}
    entry = Entry.from_mapping({"name": "b", "definition": "."})
    specs = PerGPU(Script(entry, system, "main.py", python="python")).processes()
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in specs] == ["GPU-aaaa", "GPU-bbbb"]
    assert all(s.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" for s in specs)
    assert "CUDA_DEVICE_ORDER" not in benchmark_env(entry, {"arch": "cpu"})


def test_every_process_knows_the_node_gpu_count():
    """``MILABENCH_GPU_COUNT``: the node's GPUs as the plans count them (0 on a CPU node,
    whatever the system file says), what a prepare step sizes a shared data set by."""
    entry = Entry.from_mapping({"name": "b", "definition": "."})
    system = {"arch": "cuda", "gpu": {"count": 4}}
    assert benchmark_env(entry, system)["MILABENCH_GPU_COUNT"] == "4"
    specs = PerGPU(Script(entry, system, "prepare.py", python="python")).processes()
    assert [s.env["MILABENCH_GPU_COUNT"] for s in specs] == ["4"] * 4  # not the process's 1
    assert benchmark_env(entry, {"arch": "cpu", "gpu": {"count": 2}})["MILABENCH_GPU_COUNT"] == "0"


@pytest.fixture
def fake_pynvml(monkeypatch):
    """The fake module imported as `pynvml` (the real one stays importable by path)."""
    yield from fakenvml.fake_pynvml(monkeypatch, devices=8)


def test_fake_pynvml_has_the_real_modules_interface(monkeypatch):
    real = pytest.importorskip("pynvml")  # nvidia-ml-py, installed with the test extras
    if Path(real.__file__).parent == FAKES:
        pytest.skip("the fake is on sys.path")
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKES / "pynvml.py")
    fake = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fake_pynvml", fake)  # its dataclasses look it up
    spec.loader.exec_module(fake)
    names = [n for n in vars(fake) if n.startswith(("nvml", "NVML"))]
    assert len(names) > 15
    missing = [n for n in names if not hasattr(real, n)]
    assert not missing, f"not in the real pynvml: {missing}"


def test_nvml_back_end_counts_only_the_visible_devices(fake_pynvml, monkeypatch):
    from benchkit.accelerators import NVMLAccelerators
    from milabench.machine.accelerators import detect

    found = detect(refresh=True)
    assert isinstance(found, NVMLAccelerators) and found.count == 8
    assert found.system_info()["driver_version"] == "550.54.15"
    devices = fake_pynvml.DEVICES
    mig = fake_pynvml.FakeDevice(99, "MIG-1111-2222", name="NVIDIA H100 MIG 1g.10gb")
    devices[5].mig.append(mig)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"3,{devices[6].uuid},{mig.uuid}")
    found = detect(refresh=True)
    assert found.count == 3
    assert [d["product"] for d in found.devices()] == [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 MIG 1g.10gb",
    ]
    sample = found.sample()
    assert set(sample) == {"0", "1", "2"} and sample["0"]["load"] == 0.87
    assert sample["0"]["power"] == 412.0 and sample["0"]["memory"] == [1024, 81559]


def test_benchkit_sampler_follows_the_same_restriction(fake_pynvml, monkeypatch):
    from benchkit.accelerators import NVMLAccelerators

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{fake_pynvml.DEVICES[2].uuid},7")
    sampler = NVMLAccelerators.probe()
    assert [h.index for h in sampler.handles.values()] == [2, 7]
    assert set(sampler.sample()) == {"0", "1"}
