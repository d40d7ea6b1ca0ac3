"""Faults of the machine, not of a benchmark: an unwritable --base, a report
written into a missing folder, a disk that fills up during a run. Each is one line
naming the path, never a traceback, and leaves nothing running. Real `milabench`."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest
from clirun import milabench as run_milabench
from systemtools import cannot_run_here

from milabench.events import read_events

from .conftest import BENCHMARKS, MARK_VAR

SUITE = f"""
_defaults:
  weight: 1
  plan: {{method: njobs}}
  env:
    {MARK_VAR}: "${{oc.env:{MARK_VAR},none}}"
noop:
  definition: {BENCHMARKS}/noop
diskfill:
  definition: {BENCHMARKS}/diskfill
monitored:
  definition: {BENCHMARKS}/monitored
  env:
    MILABENCH_FAKE_GPUS: "cuda:1:1000:lost@3"
"""


def milabench(tmp_path: Path, *args: str, mark: str = "none") -> subprocess.CompletedProcess:
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    return run_milabench(*args, "--config", str(suite), env={MARK_VAR: mark})


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def leftovers(mark: str) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK_VAR) == mark:
                out.append(proc)
        except (psutil.Error, OSError):
            pass
    return out


@pytest.fixture
def tmpfs(tmp_path: Path):
    """Mount a tmpfs for the test (options given to the returned function); unmounted
    at the end. Skips when mounting is not allowed here."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        where = tmp_path / f"mnt{len(mounted)}"
        where.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            cannot_run_here(f"cannot mount a tmpfs: {proc.stderr.strip() or proc.returncode}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.parametrize("command", ["run", "install", "prepare"])
def test_base_under_a_file_is_one_line(tmp_path: Path, command: str):
    (tmp_path / "afile").write_text("")
    base = tmp_path / "afile" / "base"
    proc = milabench(tmp_path, command, "--base", str(base), "--use-current-env")
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc) == (
        f"milabench: error: --base {base}: cannot create runs: Not a directory"
    )


def test_read_only_base_is_one_line(tmp_path: Path, tmpfs):
    base = tmpfs("ro,size=1m") / "base"
    proc = milabench(tmp_path, "run", "--base", str(base), "--use-current-env")
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc) == (
        f"milabench: error: --base {base}: cannot create runs: Read-only file system"
    )


@pytest.mark.slow
def test_report_output_into_a_missing_folder(tmp_path: Path):
    base = tmp_path / "base"
    proc = milabench(tmp_path, "run", "--base", str(base), "--use-current-env",
                     "--select", "noop")  # fmt: skip
    assert (base / "runs").is_dir(), proc.stderr  # noop measures nothing: a failed run
    out = tmp_path / "new" / "deeper" / "report.md"
    proc = milabench(tmp_path, "report", "--base", str(base), "--output", str(out))
    assert out.is_file() and out.read_text()
    assert f"created folder {out.parent} for --output" in proc.stderr
    (tmp_path / "afile").write_text("")
    bad = tmp_path / "afile" / "report.md"
    proc = milabench(tmp_path, "report", "--base", str(base), "--output", str(bad))
    assert proc.returncode == 2
    assert one_error_line(proc) == (
        f"milabench: error: --output {bad}: {bad.parent} is not a folder"
    )


@pytest.mark.slow
def test_full_disk_during_a_run(tmp_path: Path, tmpfs):
    base = tmpfs("size=2m")
    mark = f"faults-{uuid.uuid4().hex}"
    # --ignore-doctor: the doctor refuses to start on a disk this full (tested in
    # tests/doctor); this test is about the disk filling up *during* the run
    proc = milabench(tmp_path, "run", "--base", str(base), "--use-current-env",
                     "--ignore-doctor", "--select", "diskfill", mark=mark)  # fmt: skip
    # the cut file has no `end` event: the report says FAIL, and the exit code with it
    assert proc.returncode == 1
    assert re.search(r"^Verdict: +FAIL \(exit code 1\)$", proc.stdout, re.M), proc.stdout
    line = one_error_line(proc)
    assert line.startswith("milabench: error: cannot write ") and line.endswith(
        "diskfill.0.data: No space left on device"
    ), proc.stderr
    [run_dir] = (base / "runs").iterdir()
    data = run_dir / "diskfill.0.data"
    events = list(read_events(data))  # every line that stayed is a whole JSON line
    assert len(events) > 10 and data.read_bytes().endswith(b"\n")
    assert not leftovers(mark)


def test_failing_monitor_is_a_recorded_warning(tmp_path: Path):
    # The accelerator (the fake of the NVML back-end) falls off the bus mid-run: the
    # benchmark goes on, its measurement stands, and the report says why usage data
    # stops there instead of leaving it silently absent.
    mark = f"faults-{uuid.uuid4().hex}"
    base = tmp_path / "base"
    proc = milabench(tmp_path, "run", "--base", str(base), "--use-current-env",
                     "--select", "monitored", mark=mark)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert re.search(r"^Verdict: +PASS \(exit code 0\)$", proc.stdout, re.M), proc.stdout
    assert "accelerator monitor stopped: RuntimeError: GPU is lost" in proc.stdout
    [run_dir] = (base / "runs").iterdir()
    events = list(read_events(run_dir / "monitored.0.data"))
    warnings = [e for e in events if e["event"] == "message" and e["data"].get("warning")]
    assert len(warnings) == 1 and warnings[0]["data"]["warning"] == "monitor"
    assert sum("gpudata" in (e.get("data") or {}) for e in events) == 2  # before the loss
    assert events[-1]["event"] == "end" and events[-1]["data"]["return_code"] == 0
    assert not leftovers(mark)
