"""A real run with a CPU hog started halfway through one benchmark: the report names the
hog as interference for that benchmark and for no other."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SUITE = HERE / "suite.yaml"


def _data(run: Path, name: str) -> str:
    for path in run.glob(f"{name}.*data"):
        return path.read_text()
    return ""


def _wait(predicate, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"milabench run ended early: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError("timed out waiting for the run")


@pytest.mark.slow
def test_a_cpu_hog_is_named_for_the_benchmark_it_ran_in_only(tmp_path):
    hog_exe = tmp_path / "mb-cpu-hog"  # its own name: /proc/<pid>/stat shows it
    shutil.copy("/usr/bin/yes", hog_exe)
    run = tmp_path / "runs" / "hog"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    cmd = [sys.executable, "-m", "milabench", "run", "--config", str(SUITE), "--base",
           str(tmp_path), "--use-current-env", "--select", "a,b,c", "--run-name", "hog",
           "--dash", "no"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "MILABENCH_DASH": "no"})  # fmt: skip
    hog = None
    try:
        _wait(lambda: '"warmup"' in _data(run, "b"), 120, proc)  # b's window has begun
        time.sleep(1.0)  # a second into its 3 s window: the hog has the other two
        hog = subprocess.Popen([str(hog_exe)], stdout=subprocess.DEVNULL)
        _wait(lambda: '"window"' in _data(run, "b"), 60, proc)  # b's window is over
        hog.kill()
        hog.wait()
        out, err = proc.communicate(timeout=120)
    finally:
        if hog is not None and hog.poll() is None:
            hog.kill()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out + err
    report = json.loads((run / "report.json").read_text())
    rows = {r["name"]: r for r in report["benchmarks"]}
    named = {}
    for name, row in rows.items():
        detail = row.get("interference_detail") or {}
        tops = [t[0] for t in detail.get("top") or []]
        named[name] = "mb-cpu-hog" in tops or any("mb-cpu-hog" in w for w in row["warnings"])
    assert named == {"a": False, "b": True, "c": False}, {n: r["warnings"] for n, r in rows.items()}
    b = rows["b"]
    assert b["interference"].startswith("others ")
    sentence = next(w for w in b["warnings"] if w.startswith("other processes used"))
    assert "of the" in sentence and "CPUs during the measured window (busiest: " in sentence
    text = (run / "report.md").read_text()  # the column and the sentence in the text too
    assert "| interference |" in text and sentence in text.replace("\\|", "|")
    if b["interference_detail"]["top"][0][0] == "mb-cpu-hog":  # the host was otherwise quiet
        assert "busiest: mb-cpu-hog " in sentence
    # the run recorded the doctor's findings it started with
    assert (run / "doctor.json").is_file()
    assert report["doctor"] and {f["check"] for f in report["doctor"]} >= {"steal", "memory"}
