"""`milabench doctor` and the checks `milabench run` makes first, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SUITE = HERE / "suite.yaml"
FAKES = HERE.parent / "fakes"
# persistence off, a 70% power cap, a PCIe x8 link: two warnings and one failure
DEGRADED = {
    "count": 1,
    "devices": {"0": {"persistence": 0, "power_limit_mw": 490000, "pcie_width": 8}},
}


def milabench(*args: str, nvml: dict | None = None, timeout: float = 120):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILABENCH_", "FAKE_PYNVML"))}
    env["MILABENCH_DASH"] = "no"
    if nvml is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAKES), env.get("PYTHONPATH")]))
        env["FAKE_PYNVML_DEVICES"] = json.dumps(nvml)
        env["MILABENCH_GPU_ARCH"] = "cpu"  # the benchmarks themselves run on the CPU
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        env=env,
    )


def gpu_problems(stdout: str) -> list[list[str]]:
    rows = [line.split(None, 3) for line in stdout.splitlines()]
    return [r for r in rows if len(r) == 4 and r[1].startswith("gpu") and r[2] != "ok"]


def test_doctor_names_the_three_problems_and_exits_1_for_the_failure(tmp_path):
    done = milabench("doctor", "--config", str(SUITE), "--base", str(tmp_path), nvml=DEGRADED)
    assert done.returncode == 1, done.stdout + done.stderr
    problems = gpu_problems(done.stdout)
    assert [(r[0], r[1], r[2]) for r in problems] == [
        ("persistence_mode", "gpu0", "warn"),
        ("power_limit", "gpu0", "fail"),
        ("pcie_link", "gpu0", "warn"),
    ]
    assert "490 W is 70% of the default 700 W" in done.stdout
    assert "x8, the GPU and slot allow x16" in done.stdout
    assert "1 failure" in done.stdout.splitlines()[-1]
    as_json = milabench(
        "doctor", "--config", str(SUITE), "--base", str(tmp_path), "--format", "json",
        "--sample", "0.1", nvml=DEGRADED,
    )  # fmt: skip
    data = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and data["worst"] == "fail"
    assert {f["check"] for f in data["findings"] if f["severity"] != "ok" and f["subject"] == "gpu0"} == {
        "persistence_mode", "power_limit", "pcie_link"
    }  # fmt: skip


def test_doctor_on_this_machine_prints_the_host_and_passes(tmp_path):
    done = milabench("doctor", "--config", str(SUITE), "--base", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    for check in ("cpu_governor", "steal", "cpu_pressure", "other_processes", "memory", "swap"):
        assert f"\n{check} " in done.stdout
    assert "fail" not in [line.split()[2] for line in done.stdout.splitlines()[1:-1]]


@pytest.mark.slow
def test_run_refuses_on_a_failure_unless_told_and_records_the_findings(tmp_path):
    args = ["run", "--config", str(SUITE), "--base", str(tmp_path), "--use-current-env",
            "--select", "quick"]  # fmt: skip
    refused = milabench(*args, "--run-name", "refused", nvml=DEGRADED)
    assert refused.returncode == 1
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith("milabench: error: refused to start: gpu0 power_limit: power limit")
    assert error.endswith(" lists every check, --ignore-doctor runs anyway")
    assert "milabench doctor: warn: gpu0 pcie_link" in refused.stderr
    assert not list((tmp_path / "runs").glob("refused/*.data"))
    ran = milabench(*args, "--run-name", "ignored", "--ignore-doctor", nvml=DEGRADED)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run = tmp_path / "runs" / "ignored"
    recorded = json.loads((run / "doctor.json").read_text())
    assert recorded["ignored"] is True and recorded["worst"] == "fail"
    text = (run / "report.md").read_text()
    assert "**Machine at the start**" in text and "fail: gpu0 power_limit" in text
    report = json.loads((run / "report.json").read_text())
    assert any(f["check"] == "power_limit" and f["severity"] == "fail" for f in report["doctor"])
    off = milabench(*args, "--run-name", "off", nvml=DEGRADED, timeout=120)
    assert off.returncode == 1  # the option below turns the checks off instead
    env_off = subprocess.run(
        [sys.executable, "-m", "milabench", *args, "--run-name", "off"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "MILABENCH_RUN_DOCTOR": "off", "MILABENCH_DASH": "no",
             "PYTHONPATH": str(FAKES), "FAKE_PYNVML_DEVICES": json.dumps(DEGRADED),
             "MILABENCH_GPU_ARCH": "cpu"},
    )  # fmt: skip
    assert env_off.returncode == 0, env_off.stderr
    assert not (tmp_path / "runs" / "off" / "doctor.json").exists()
