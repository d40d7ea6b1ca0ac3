"""MFU counted right: every GPU of every node counted, one peak per die
of multi-die packages (MI250/MI250X), and the recomputation of activation checkpointing
kept out of the model FLOPs (shown beside them as hardware FLOPs and HFU). Each figure is
checked against arithmetic done by hand on run folders written as the real runs write
them."""

from __future__ import annotations

import copy
import csv
import io
import json
import sys
from pathlib import Path

import pytest

from benchkit.accelerators import FakeAccelerators
from milabench.report import build_report, render
from milabench.report.aggregate import count_devices
from milabench.report.efficiency import PeakTableError, load_peaks, parse_peaks
from milabench.report.runs import read_run_dir

sys.path.insert(0, str(Path(__file__).parent))
from synth import META, entry, write_file  # noqa: E402


def node_meta(product: str, n: int = 8) -> dict:
    """The `meta` record of a node of ``n`` devices named ``product``."""
    meta = copy.deepcopy(META)
    meta["accelerators"] = {
        "arch": "cuda",
        "gpus": {str(i): {"device": i, "product": product, "memory": {"total": 81559}} for i in range(n)},
    }  # fmt: skip
    return meta


def fake_samples(count: int = 8, n: int = 6) -> list[dict]:
    """``gpudata`` samples of ``count`` fake GPUs (MILABENCH_FAKE_GPUS's back-end)."""
    fake = FakeAccelerators("cuda", count)
    return [fake.sample() for _ in range(n)]


def flops(per_item: float, precision: str = "bf16", hardware: float | None = None) -> dict:
    data = {"task": "train", "flops_per_item": per_item, "precision": precision,
            "flops_source": "analytic"}  # fmt: skip
    if hardware is not None:
        data["hardware_flops_per_item"] = hardware
    return {"event": "data", "pipe": "data", "data": data}


def two_node_run(tmp_path: Path, product: str = "NVIDIA H100 80GB HBM3") -> Path:
    """A two-node torchrun entry as `plan.multinode` names its files (``<name>.0.<node>``):
    global rank 0 on the main node writes the rates (the whole job's tokens/s), the FLOPs
    declaration and the samples of its node's 8 GPUs; the other node's launcher writes
    no record (its ranks never write), and ends with 0."""
    d = tmp_path / "runs" / "two-nodes"
    config = entry("llm-full-mp-nodes", plan={"method": "torchrun"}, num_machines=2)
    write_file(
        d, "llm-full-mp-nodes.0.node0", config, rates=[4000.0] * 10,
        meta=node_meta(product), gpudata=fake_samples(), extra=[flops(4.2e11)],
    )  # fmt: skip
    write_file(d, "llm-full-mp-nodes.0.node1", config, meta=node_meta(product))
    return d


def test_two_nodes_of_eight_gpus_count_sixteen(tmp_path):
    d = two_node_run(tmp_path)
    files = read_run_dir(d)
    assert sorted(fr.node for fr in files) == ["node0", "node1"]
    # only the main node has samples: the indexes 0..7 are the same on both nodes
    assert {k for fr in files for _, gd in fr.gpudata for k in gd} == {str(i) for i in range(8)}
    assert count_devices(files) == 16
    br = build_report([d]).bench("llm-full-mp-nodes")
    assert br.ngpu == 16
    # by hand: 4000 tokens/s x 4.2e11 FLOPs per token = 1680 TFLOPS;
    # 16 H100 SXM at 989.4 dense bf16 TFLOPS each = 15830.4 TFLOPS; MFU = 10.61%
    assert br.raw_rate == pytest.approx(4000.0)
    assert br.tflops == pytest.approx(1680.0)
    assert br.peak_tflops == pytest.approx(15830.4)
    assert br.mfu == pytest.approx(1680.0 / 15830.4)
    assert br.mfu == pytest.approx(0.106125, abs=1e-6)
    row = json.loads(render(build_report([d]), "json"))["benchmarks"][0]
    assert row["ngpu"] == 16 and row["mfu"] == pytest.approx(0.106125, abs=1e-6)


def test_device_count_per_node_and_per_process():
    """Per-device processes are counted by (node, device); one process per node by the
    samples of its node, a node without samples like the others."""
    from milabench.report.runs import FileResult

    def fr(tag: str, node=None, device=None, keys=()) -> FileResult:
        f = FileResult(tag=tag, path=Path(tag), name="x")
        f.node, f.device = node, device
        f.gpudata = [(0.0, {k: {} for k in keys})] if keys else []
        return f

    assert count_devices([fr("x.D0", device="0"), fr("x.D1", device="1")]) == 2
    assert count_devices([fr("a", "n0", "0"), fr("b", "n1", "0")]) == 2
    eight = [str(i) for i in range(8)]
    assert count_devices([fr("a", "n0", keys=eight), fr("b", "n1"), fr("c", "n2")]) == 24
    assert count_devices([fr("a", keys=["0", "1"])]) == 2
    assert count_devices([fr("a"), fr("b", "n1")]) == 0  # nothing seen: no guess


def test_mi250x_peak_is_per_die(tmp_path):
    peaks = load_peaks()
    # the MI250X datasheet's 383 bf16 TFLOPS are for the package of two GCDs; rocm-smi
    # and torch list each GCD as a device
    assert peaks.peak("AMD INSTINCT MI250X", "bf16") == pytest.approx(191.5)
    assert peaks.peak("AMD Instinct MI250", "fp16") == pytest.approx(362.1 / 2)
    assert peaks.peak("AMD Instinct MI300X", "bf16") == pytest.approx(1307.4)  # one device
    d = tmp_path / "runs" / "mi250x"
    for dev in range(8):  # 4 packages = 8 GCDs, one process each
        write_file(
            d, f"bert.D{dev}", entry("bert"), rates=[500.0] * 8,
            meta=node_meta("AMD INSTINCT MI250X"), extra=[flops(3e11, "fp16")],
        )  # fmt: skip
    br = build_report([d]).bench("bert")
    # by hand: 8 x 500 items/s x 3e11 = 1200 TFLOPS over 8 GCDs of 191.5 fp16 TFLOPS = 78.3%
    assert br.ngpu == 8 and br.tflops == pytest.approx(1200.0)
    assert br.peak_tflops == pytest.approx(8 * 191.5)
    assert br.mfu == pytest.approx(1200.0 / 1532.0)


def test_dies_in_a_peaks_file(tmp_path):
    extra = tmp_path / "peaks.yaml"
    extra.write_text("devices:\n  MI300X: {bf16: 1307.4, dies: 8}\n")
    assert load_peaks(extra).peak("AMD Instinct MI300X", "bf16") == pytest.approx(163.425)
    for bad in (0, 1.5, "two", True):
        with pytest.raises(PeakTableError, match=r"devices\.X\.dies: expected a whole number"):
            parse_peaks({"devices": {"X": {"bf16": 1, "dies": bad}}}, "f.yaml")


def test_recomputation_is_not_model_flops(tmp_path):
    """A checkpointed entry declares its model FLOPs and, beside them, what the device
    executed (one forward recomputed: 4/3 of the model's work for a pure matmul model):
    MFU is of the model FLOPs, HFU of the hardware FLOPs."""
    d = tmp_path / "runs" / "r"
    write_file(
        d, "dinov2.D0", entry("dinov2"), rates=[100.0] * 8,
        meta=node_meta("NVIDIA H100 80GB HBM3", 1), extra=[flops(3e12, hardware=4e12)],
    )  # fmt: skip
    rep = build_report([d])
    br = rep.bench("dinov2")
    assert br.tflops == pytest.approx(300.0) and br.hardware_tflops == pytest.approx(400.0)
    assert br.mfu == pytest.approx(300.0 / 989.4) and br.hfu == pytest.approx(400.0 / 989.4)
    text = render(rep, "text")
    header = [c.strip() for c in text.split("Breakdown\n---------\n")[1].splitlines()[0].split("|")]
    assert header[header.index("MFU") + 1] == "HFU"
    row = text.split("Breakdown\n---------\n")[1].splitlines()[1]
    assert "30.3%" in row and "40.4%" in row
    data = json.loads(render(rep, "json"))["benchmarks"][0]
    assert data["hfu"] == pytest.approx(400.0 / 989.4)
    assert data["hardware_flops_per_item"] == pytest.approx(4e12)
    rows = list(csv.DictReader(io.StringIO(render(rep, "csv"))))
    assert float(rows[0]["hardware_tflops"]) == pytest.approx(400.0)


def test_no_hardware_flops_no_hfu_column(tmp_path):
    d = tmp_path / "runs" / "r"
    write_file(
        d, "llm.D0", entry("llm"), rates=[100.0] * 8,
        meta=node_meta("NVIDIA H100 80GB HBM3", 1), extra=[flops(3e12)],
    )  # fmt: skip
    rep = build_report([d])
    assert rep.bench("llm").hfu is None
    assert "HFU" not in render(rep, "text")
    assert "hfu" not in render(rep, "csv").splitlines()[0].split(",")
    assert "hfu" not in json.loads(render(rep, "json"))["benchmarks"][0]
