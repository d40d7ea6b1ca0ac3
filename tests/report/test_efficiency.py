"""TFLOPS, MFU, energy and items/J in the report: the peaks table, the arithmetic on run
folders with known contents, every output format, and a real run whose monitors read the
fake NVML module (tests/fakes/pynvml.py) so that energy comes from its counter."""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from milabench.report import build_report, render
from milabench.report.efficiency import (
    PeakTableError,
    counter_energy,
    load_peaks,
    parse_peaks,
)
from milabench.report.runs import read_file

sys.path.insert(0, str(Path(__file__).parent))
from synth import META, entry, write_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"


def h100_meta(n: int = 2) -> dict:
    meta = copy.deepcopy(META)
    meta["accelerators"] = {
        "arch": "cuda",
        "gpus": {
            str(i): {"device": i, "product": "NVIDIA H100 80GB HBM3", "memory": {"total": 81559}}
            for i in range(n)
        },
    }
    return meta


def flops_record(per_item: float, precision: str = "bf16") -> dict:
    data = {"task": "train", "flops_per_item": per_item, "precision": precision}
    return {"event": "data", "pipe": "data", "data": {**data, "flops_source": "counted"}}


def counters(power: float, start: float, n: int = 6, devices: tuple[str, ...] = ("0",)):
    """gpudata samples 1 s apart whose energy counters grow by `power` J each second."""
    return [
        {
            d: {"memory": [1000, 81920], "load": 0.9, "power": power, "energy": start + power * i}
            for d in devices
        }
        for i in range(n)
    ]


# -- the peaks table -------------------------------------------------------------------


def test_longest_pattern_wins_and_unknown_gives_nothing():
    peaks = load_peaks()
    assert peaks.peak("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peaks.peak("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert peaks.peak("NVIDIA L40S", "fp16") == 362.0 and peaks.peak("NVIDIA L40", "fp16") == 181
    assert peaks.peak("NVIDIA A100-SXM4-80GB", "fp8") is None  # no FP8 on A100
    assert peaks.peak("Fake cuda device", "bf16") is None
    assert peaks.peak(None, "bf16") is None


def test_override_file_merges(tmp_path, monkeypatch):
    extra = tmp_path / "peaks.yaml"
    extra.write_text("devices:\n  H100: {bf16: 500}\n  My Accel 9: {fp32: 10, fp16: 40}\n")
    peaks = load_peaks(extra)
    assert peaks.peak("My Accel 9000", "fp16") == 40
    assert peaks.peak("NVIDIA H100", "bf16") == 500  # the same pattern replaced
    assert peaks.peak("NVIDIA H100 PCIe", "bf16") == 756.0  # the others kept
    monkeypatch.setenv("MILABENCH_PEAKS", str(extra))
    assert load_peaks().peak("My Accel 9", "fp32") == 10


@pytest.mark.parametrize(
    "text, message",
    [
        ("devices: [1, 2]", "expected a mapping `devices:"),
        ("devices:\n  X: {bf17: 3}", "devices.X.bf17: unknown precision"),
        ("devices:\n  X: {bf16: -3}", "devices.X.bf16: expected a positive number"),
        ("devices:\n  X: 12", "devices.X: expected a mapping of peaks"),
    ],
)
def test_bad_peaks_file_names_file_and_key(tmp_path, text, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(PeakTableError, match=message) as err:
        load_peaks(bad)
    assert str(bad) in str(err.value)
    with pytest.raises(PeakTableError, match="not found"):
        load_peaks(tmp_path / "missing.yaml")
    assert parse_peaks({"devices": {}}, "x").lookup("anything") is None


def test_report_cli_rejects_a_bad_peaks_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("devices:\n  X: {bf16: fast}\n")
    d = tmp_path / "runs" / "r"
    write_file(d, "a.D0", entry("a"), rates=[1.0] * 5)
    out = subprocess.run(
        [sys.executable, "-m", "milabench", "report", "--runs", str(d), "--peaks", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "bad.yaml: devices.X.bf16" in out.stderr and "Traceback" not in out.stderr


# -- arithmetic ----------------------------------------------------------------------


def test_tflops_and_mfu_per_gpu(tmp_path):
    d = tmp_path / "runs" / "r"
    for dev in ("0", "1"):
        write_file(
            d,
            f"llm.D{dev}",
            entry("llm"),
            rates=[1000.0] * 8,
            meta=h100_meta(),
            extra=[flops_record(2e11)],
        )
    br = build_report([d]).bench("llm")
    assert br.raw_rate == pytest.approx(2000.0)  # two devices summed
    assert br.tflops == pytest.approx(2000.0 * 2e11 / 1e12)  # 400 TFLOPS
    assert br.product == "NVIDIA H100 80GB HBM3" and br.flops_precision == "bf16"
    assert br.peak_tflops == pytest.approx(2 * 989.4)
    assert br.mfu == pytest.approx(400.0 / (2 * 989.4))
    if br.ci_low is not None:
        assert br.tflops_low == pytest.approx(br.ci_low * 2e11 / 1e12)


def test_no_declaration_or_no_peak_gives_no_column_value(tmp_path):
    d = tmp_path / "runs" / "r"
    write_file(d, "plain.D0", entry("plain"), rates=[5.0] * 6)
    write_file(d, "cpu.D0", entry("cpu"), rates=[5.0] * 6, extra=[flops_record(1e9, "fp32")])
    rep = build_report([d])
    assert rep.bench("plain").tflops is None and rep.bench("plain").mfu is None
    cpu = rep.bench("cpu")
    assert cpu.tflops == pytest.approx(5.0 * 1e9 / 1e12) and cpu.mfu is None  # no device


def test_energy_from_counters_beats_power_samples(tmp_path):
    d = tmp_path / "runs" / "r"
    # the power samples say 100 W, the counters say 300 W: the counters are exact
    gd = counters(300.0, 5e6)
    for g in gd:
        g["0"]["power"] = 100.0
    write_file(d, "e.D0", entry("e"), rates=[600.0] * 6, gpudata=gd, meta=h100_meta(1))
    br = build_report([d]).bench("e")
    assert br.energy_source == "counter"
    assert br.energy == pytest.approx(300.0 * 5)
    assert br.mean_power == pytest.approx(300.0)
    assert br.perf_per_watt == pytest.approx(600.0 / 300.0)  # items per joule


def test_counter_going_backwards_falls_back_to_power(tmp_path):
    d = tmp_path / "runs" / "r"
    gd = counters(200.0, 5e6)
    gd[3]["0"]["energy"] = 10.0  # driver reloaded: the counter restarted
    write_file(d, "w.D0", entry("w"), rates=[10.0] * 6, gpudata=gd)
    assert counter_energy(read_file(d / "w.D0.data")) is None
    br = build_report([d]).bench("w")
    assert br.energy_source == "power" and br.energy == pytest.approx(200.0 * 5)


def test_multi_device_counters_sum(tmp_path):
    d = tmp_path / "runs" / "r"
    gd = counters(250.0, 1e5, devices=("0", "1", "2", "3"))
    write_file(
        d, "ddp.0", entry("ddp", plan={"method": "njobs", "n": 1}), rates=[40.0] * 6, gpudata=gd
    )
    br = build_report([d]).bench("ddp")
    assert br.energy == pytest.approx(4 * 250.0 * 5) and br.mean_power == pytest.approx(1000.0)


def test_columns_in_every_format(tmp_path):
    d = tmp_path / "runs" / "r"
    write_file(
        d,
        "llm.D0",
        entry("llm"),
        rates=[1000.0] * 8,
        meta=h100_meta(1),
        gpudata=counters(500.0, 1e6),
        extra=[flops_record(2e11)],
    )
    rep = build_report([d])
    text = render(rep, "text")
    header = text.split("Breakdown\n---------\n")[1].splitlines()[0]
    columns = [c.strip() for c in header.split("|")]
    assert columns[-6:] == ["TFLOPS", "MFU", "energy", "items/J", "score", "weight"]
    row = text.split("Breakdown\n---------\n")[1].splitlines()[1]
    assert "200" in row and "20.2%" in row and "2.50 kJ" in row  # 200 TFLOPS / 989.4
    md = render(rep, "markdown")
    assert "| TFLOPS | MFU | energy | items/J |" in md
    data = json.loads(render(rep, "json"))["benchmarks"][0]
    assert data["tflops"] == pytest.approx(200.0) and data["mfu"] == pytest.approx(200 / 989.4)
    assert data["energy"] == pytest.approx(2500.0) and data["energy_source"] == "counter"
    assert data["items_per_joule"] == pytest.approx(2.0)
    assert data["accelerator"] == "NVIDIA H100 80GB HBM3" and data["flops_precision"] == "bf16"
    rows = list(csv.DictReader(io.StringIO(render(rep, "csv"))))
    assert float(rows[0]["mfu"]) == pytest.approx(200 / 989.4)
    assert float(rows[0]["items_per_joule"]) == pytest.approx(2.0)
    html = render(rep, "html")
    assert "<th>TFLOPS</th>" in html and "<th>MFU</th>" in html and "<th>items/J</th>" in html


def test_cpu_report_keeps_its_columns(tmp_path):
    d = tmp_path / "runs" / "r"
    write_file(d, "a.D0", entry("a"), rates=[5.0] * 6)
    header = render(build_report([d]), "text").split("Breakdown\n---------\n")[1].splitlines()[0]
    assert "TFLOPS" not in header and "energy" not in header


# -- a real run whose monitors read the fake NVML --------------------------------------


@pytest.mark.slow
def test_real_run_with_fake_nvml_reports_energy_and_mfu(tmp_path):
    """`milabench run` of the flops benchmark on CPU while NVML (the fake module, first on
    PYTHONPATH for milabench and the benchmark) reports one H100: the run's metadata names
    the H100, the samples carry its energy counter, and the report shows TFLOPS, MFU
    against the H100's fp32 peak, energy from the counter and items/J."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"""
include: {ROOT / "config" / "base.yaml"}
mm:
  inherits: _flops
  weight: 1
  measure: {{warmup_min: 0.2s, warmup_max: 1s, min: 2s, max: 3s, startup: 90s}}
  voir: {{options: {{gpu_poll: 0.2}}}}
  argv:
    --device: cpu
    --dtype: fp32
    --size: 256
    --step-ms: 20
"""
    )
    env = dict(os.environ)
    for key in ("MILABENCH_FAKE_GPUS", "MILABENCH_GPU_ARCH", "MILABENCH_CONFIG"):
        env.pop(key, None)
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES), str(ROOT), env.get("PYTHONPATH", "")])
    env["CUDA_VISIBLE_DEVICES"] = "0"
    base = tmp_path / "base"
    common = ["--config", str(suite), "--base", str(base), "--use-current-env"]
    run = subprocess.run(
        [sys.executable, "-m", "milabench", "run", *common, "--run-name", "nv"],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = subprocess.run(
        [sys.executable, "-m", "milabench", "report", "--runs", str(base / "runs" / "nv")]
        + ["--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    row = json.loads(report.stdout)["benchmarks"][0]
    assert row["accelerator"] == "NVIDIA H100 80GB HBM3"
    assert row["tflops"] == pytest.approx(row["rate"], rel=1e-9)  # flops: 1 item = 1 TFLOP
    assert row["mfu"] == pytest.approx(row["tflops"] / 66.9)
    assert row["energy_source"] == "counter" and row["energy"] > 0
    assert row["mean_power"] == pytest.approx(412.0, rel=0.05)  # the fake's 412 W
    assert row["items_per_joule"] == pytest.approx(row["rate"] / row["mean_power"])
