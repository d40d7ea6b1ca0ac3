"""Golden outputs: a device that is fast but wrong fails the run.

Benchmarks write `{"task": "golden", "golden": {...}}` records (`benchkit.golden`); the
`golden` validation layer, on by default, fails when one says ``passed: false``, with
the check, its error and its tolerance on the line; the verdict and the exit code follow.
The run folders are real `.data` files written event by event (`synth.py`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from milabench.report import build_report, render
from milabench.report.runs import read_file
from milabench.report.validation import ALL_LAYERS, DEFAULT_LAYERS, select_layers

from .conftest import milabench

sys.path.insert(0, str(Path(__file__).parent))
from synth import entry, write_file  # noqa: E402

RATES = [100.0, 102.0, 98.0, 101.0, 99.0, 103.0, 97.0, 100.0, 101.0, 99.0]
FAIL_LINE = (
    "flops-fp32: golden check matmul fp32 failed: max relative error 3.1e-02 > tolerance 1e-05"
)


def golden(name="matmul", dtype="fp32", error=3.3e-7, tol=1e-5, passed=None) -> dict:
    payload = {
        "name": name,
        "dtype": dtype,
        "max_rel_error": error,
        "tolerance": tol,
        "passed": error <= tol if passed is None else passed,
        "reference": "float64 on cpu",
    }
    return {
        "event": "data",
        "pipe": "data",
        "data": {"task": "golden", "golden": payload, "time": 1_000_000.5},
    }


def bench(d: Path, name: str, *checks: dict, tag: str | None = None) -> Path:
    cfg = entry(name, plan={"method": "njobs", "n": 1})
    return write_file(d, tag or name, cfg, rates=RATES, extra=list(checks))


def layer(report, name="golden"):
    return next(x for x in report.layers if x.name == name)


def test_golden_is_a_default_layer():
    assert "golden" in DEFAULT_LAYERS and "golden" in ALL_LAYERS
    assert "golden" in select_layers(None)
    assert "golden" not in select_layers(["-golden"])
    assert "golden" not in select_layers(["all,-golden"])


def test_golden_records_are_parsed_in_order(tmp_path: Path):
    d = tmp_path / "runs" / "parse"
    path = bench(d, "ops", golden("softmax.fwd"), golden("softmax.fwd", "bf16", 2e-3, 5e-2))
    fr = read_file(path)
    assert [(g["name"], g["dtype"]) for g in fr.golden] == [
        ("softmax.fwd", "fp32"),
        ("softmax.fwd", "bf16"),
    ]
    assert fr.golden[1]["max_rel_error"] == 2e-3 and fr.golden[1]["passed"] is True
    assert read_file(bench(d, "plain")).golden == []


def test_passing_and_missing_golden_records_pass(tmp_path: Path):
    d = tmp_path / "runs" / "ok"
    bench(d, "flops-fp32", golden())
    bench(d, "ops", golden("matmul.fwd"), golden("matmul.fwdbwd", "bf16", 2.4e-3, 5e-2))
    bench(d, "convnet")  # no golden record at all: passes the layer
    rep = build_report([d])
    assert layer(rep).passed and layer(rep).failures == []
    assert rep.verdict == "PASS" and rep.exit_code == 0


def test_failing_golden_check_fails_the_run_with_error_and_tolerance(tmp_path: Path):
    d = tmp_path / "runs" / "wrong"
    bench(d, "flops-fp32", golden(error=0.031, passed=False))
    bench(d, "convnet")
    rep = build_report([d])
    assert layer(rep).failures == [FAIL_LINE]
    # The process itself succeeded (it measured): only the layer fails the run.
    assert rep.failure_rate == 0
    assert rep.verdict == "FAIL" and rep.exit_code == 1
    assert rep.verdict_reasons == ["validation layer 'golden' failed"]
    assert FAIL_LINE in render(rep, "text") and FAIL_LINE in render(rep, "markdown")
    assert "max relative error 3.1e-02 &gt; tolerance 1e-05" in render(rep, "html")
    data = json.loads(render(rep, "json"))
    entry_ = next(v for v in data["validations"] if v["name"] == "golden")
    assert entry_["passed"] is False and entry_["failures"] == [FAIL_LINE]
    # Disabled on request: the same folder passes.
    rep = build_report([d], validations=["-golden"])
    assert "golden" not in [x.name for x in rep.layers]
    assert rep.verdict == "PASS" and rep.exit_code == 0


def test_every_failed_check_has_a_line_and_passed_ones_none(tmp_path: Path):
    d = tmp_path / "runs" / "ops"
    bench(
        d,
        "opbench-softmax",
        golden("softmax.fwd", "fp32", 0.05, 1e-5),
        golden("softmax.fwd", "bf16", 0.0504, 5e-2),
        golden("softmax.fwdbwd", "bf16", 0.01, 5e-2),  # within tolerance
        golden("softmax.fwdbwd", "tf32", 6.3e-3, 5e-3),
    )
    assert layer(build_report([d])).failures == [
        "opbench-softmax: golden check softmax.fwd fp32 failed: max relative error 5.0e-02 "
        "> tolerance 1e-05",
        # just above: more digits, so that it does not read "5.0e-02 > tolerance 5e-02"
        "opbench-softmax: golden check softmax.fwd bf16 failed: max relative error 5.040e-02 "
        "> tolerance 5e-02",
        "opbench-softmax: golden check softmax.fwdbwd tf32 failed: max relative error 6.3e-03 "
        "> tolerance 5e-03",
    ]


def test_several_processes_name_the_tags_and_the_worst_error(tmp_path: Path):
    d = tmp_path / "runs" / "gpus"
    bench(d, "flops-fp32", golden(error=0.02, passed=False), tag="flops-fp32.D0")
    bench(d, "flops-fp32", golden(), tag="flops-fp32.D1")
    bench(d, "flops-fp32", golden(error=0.031, passed=False), tag="flops-fp32.D2")
    rep = build_report([d])
    assert layer(rep).failures == [FAIL_LINE + " (in flops-fp32.D0, flops-fp32.D2)"]
    assert rep.exit_code == 1


@pytest.mark.parametrize(
    "payload, fails",
    [
        ({"name": "matmul", "dtype": "fp32", "max_rel_error": 1.0, "tolerance": 1e-5}, True),
        ({"name": "matmul", "dtype": "fp32", "max_rel_error": 1e-7, "tolerance": 1e-5}, False),
        ({"name": "matmul", "dtype": "fp32", "passed": False}, True),
        ({"name": "matmul", "dtype": "fp32", "max_rel_error": "NaN", "tolerance": 1e-5}, True),
        ({"name": "matmul", "dtype": "fp32", "max_rel_error": "Infinity", "passed": False}, True),
        ({}, False),
    ],
)
def test_records_without_passed_or_numbers_are_judged_by_what_they_say(tmp_path, payload, fails):
    d = tmp_path / "runs" / "loose"
    rec = {"event": "data", "pipe": "data", "data": {"task": "golden", "golden": payload}}
    bench(d, "flops-fp32", rec)
    rep = build_report([d])
    assert (not layer(rep).passed) is fails
    if payload.get("passed") is False:
        assert layer(rep).failures == [
            "flops-fp32: golden check matmul fp32 failed: max relative error inf > tolerance ?"
        ]


def test_skipped_process_is_not_judged(tmp_path: Path):
    d = tmp_path / "runs" / "skip"
    bench(d, "convnet")
    cfg = entry("flops-fp32", plan={"method": "njobs", "n": 1})
    skip = {"event": "message", "data": {"message": "skipped: no gpu", "skipped": True}}
    write_file(d, "flops-fp32", cfg, rc="SKIPPED", extra=[golden(error=0.5), skip])
    assert layer(build_report([d])).passed


def test_cli_report_exits_1_and_prints_the_line_then_passes_without_the_layer(tmp_path: Path):
    d = tmp_path / "runs" / "cli"
    bench(d, "flops-fp32", golden(error=0.031, passed=False))
    proc = milabench("report", "--runs", str(d))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert FAIL_LINE in proc.stdout
    assert "Verdict:      FAIL (exit code 1)" in proc.stdout
    assert "validation layer 'golden' failed" in proc.stdout
    # `-name` values start with a dash: argparse takes them with `=` (or after a name).
    for spec in ("--validations=-golden", "--validations=all,-golden"):
        proc = milabench("report", "--runs", str(d), spec)
        assert proc.returncode == 0, (spec, proc.stdout[-2000:] + proc.stderr[-2000:])
        assert "golden" not in proc.stdout.split("Validations")[-1]
        assert "Verdict:      PASS (exit code 0)" in proc.stdout
    proc = milabench("report", "--runs", str(d), "--validations", "loss,-golden")
    assert proc.returncode == 0 and FAIL_LINE not in proc.stdout
