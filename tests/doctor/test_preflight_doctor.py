"""`milabench preflight` runs the doctor's checks on every node (here: one local node)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
FAKES = HERE.parent / "fakes"


def preflight(tmp_path: Path, *extra: str, env: dict | None = None):
    system = tmp_path / "system.yaml"
    node = {"name": "local", "ip": "127.0.0.1", "user": "root", "local": True, "main": True}
    system.write_text(yaml.safe_dump({"system": {"arch": "cpu", "nodes": [node]}}))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MILABENCH_", "FAKE_"))}
    return subprocess.run(
        [sys.executable, "-m", "milabench", "preflight", "--config", str(HERE / "suite.yaml"),
         "--system", str(system), "--base", str(tmp_path / "base"), "--use-current-env",
         "--no-allreduce", "--no-versions", *extra],
        capture_output=True, text=True, timeout=300, env={**clean, **(env or {})},
    )  # fmt: skip


def test_preflight_lists_each_nodes_doctor_findings(tmp_path):
    done = preflight(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("doctor local: "))
    assert "checks ok" in line


def test_a_doctor_failure_fails_the_preflight_unless_ignored(tmp_path):
    env = {
        "PYTHONPATH": str(FAKES),
        "FAKE_PYNVML_DEVICES": json.dumps({"count": 1, "devices": {"0": {"pcie_width": 8,
                                           "ecc_uncorrected": [3, 3]}}}),
        "MILABENCH_GPU_ARCH": "cpu",
    }  # fmt: skip
    done = preflight(tmp_path, env=env)
    assert done.returncode == 1
    failed = next(ln for ln in done.stdout.splitlines() if ln.startswith("FAIL node local:"))
    assert failed.startswith("FAIL node local: milabench doctor: gpu0 ecc_errors: 3 uncorrected ")
    assert failed.endswith("before measuring (--ignore-doctor goes on anyway)")
    assert "  warn: gpu0 pcie_link: PCIe gen 5 x8" in done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith("milabench: error: node local:")
    assert preflight(tmp_path, "--ignore-doctor", env=env).returncode == 0
