"""scripts/first_light.py end to end on the CPU: the smoke suite's flops entries in this
Python (``--use-current-env``), one entry per call, resumed into one run folder, reports
written to the folder given; and a call whose budget ends during an entry."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "first_light.py"
SMOKE = ROOT / "config" / "standard-smoke.yaml"


def first_light(out: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    env["MILABENCH_GPU_ARCH"] = "cpu"
    return subprocess.run([sys.executable, str(SCRIPT), str(out), "--config", str(SMOKE),
                           *args], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=ROOT)  # fmt: skip


def state(out: Path) -> dict[str, str]:
    """Each entry's status, in suite order."""
    data = json.loads((out / "first-light.json").read_text())
    return {e["name"]: e["status"] for e in data["entries"]}


@pytest.mark.slow
def test_runs_the_selection_one_entry_per_call_and_writes_the_reports(tmp_path):
    out = tmp_path / "out"
    first = first_light(out, "--select", "fp32,bf16", "--max-entries", "1")
    assert first.returncode == 3, first.stdout + first.stderr
    assert "1 of 2 entries done; call again" in first.stdout
    (one, two) = state(out)  # suite order: bf16 comes first in standard.yaml
    assert state(out) == {one: "done", two: "pending"} and {one, two} == {"fp32", "bf16"}
    assert json.loads((out / "machine.json").read_text())["python"]  # the machine record
    assert (out / "logs" / "install.txt").is_file() and not (out / "report.md").exists()

    second = first_light(out, "--select", "fp32,bf16", "--max-entries", "1")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "all 2 entries ran; reports in" in second.stdout
    assert state(out) == {"fp32": "done", "bf16": "done"}
    runs = out / "base" / "runs" / "first-light"
    assert {p.name for p in runs.glob("*.data")} >= {"fp32.D0.data", "bf16.D0.data"}
    for name in ("report.txt", "report.md", "report.csv", "report.json"):
        assert (out / name).stat().st_size > 0, name
    with open(out / "report.csv", newline="") as fh:
        rows = {r["name"]: r for r in csv.DictReader(fh)}
    assert {"fp32", "bf16"} <= set(rows) and float(rows["fp32"]["rate"]) > 0
    summary = (out / "first-light.md").read_text()
    assert "| entry | status | wall s | rate | units | TFLOPS | MFU % | peak GPU MiB |" in summary
    assert "| fp32 | done |" in summary and "| bf16 | done |" in summary

    # done: a further call changes nothing but the reports; other options are refused
    third = first_light(out, "--select", "fp32,bf16")
    assert third.returncode == 0 and state(out) == {"fp32": "done", "bf16": "done"}
    other = first_light(out, "--select", "fp32")
    assert other.returncode == 1
    assert other.stderr.startswith("first_light: error: ") and len(other.stderr.splitlines()) == 1


@pytest.mark.slow
def test_an_entry_over_the_call_budget_is_interrupted_and_retried_on_request(tmp_path):
    out = tmp_path / "out"
    first = first_light(out, "--select", "fp32,bf16", "--max-entries", "1")
    assert first.returncode == 3, first.stdout + first.stderr
    (one, two) = state(out)
    short = first_light(out, "--select", "fp32,bf16", "--budget", "1")  # cannot fit
    assert short.returncode == 0, short.stdout + short.stderr
    assert f"not successful: {two}" in short.stdout
    assert state(out) == {one: "done", two: "timeout"}
    assert f"| {two} | timeout |" in (out / "first-light.md").read_text()

    retry = first_light(out, "--select", "fp32,bf16", "--retry-failed")
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert state(out) == {one: "done", two: "done"}
    assert f"| {two} | done |" in (out / "first-light.md").read_text()
