"""`milabench fleet` runs `milabench doctor`'s checks on every node with the node's own
Python before anything is copied: a Python that cannot import milabench's dependencies
is named with the missing module and how to point at another one; a node whose doctor
finds a failure is reported, not measured, unless --ignore-doctor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CPU_SUITE = REPO / "config" / "cpu.yaml"
FAKES = REPO / "tests" / "fakes"


def local_system(path: Path, names: list[str]) -> Path:
    nodes = [{"name": n, "ip": "127.0.0.1", "user": "root", "local": True} for n in names]
    path.write_text(yaml.safe_dump({"system": {"arch": "cpu", "nodes": nodes}}))
    return path


def fleet(
    tmp_path: Path, *extra: str, env: dict | None = None
) -> tuple[subprocess.CompletedProcess, dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    base = tmp_path / "base"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MILABENCH_", "FAKE_"))}
    done = subprocess.run(
        [sys.executable, "-m", "milabench", "fleet", "--config", str(CPU_SUITE),
         "--system", str(local_system(tmp_path / "system.yaml", ["n0", "n1"])),
         "--base", str(base), "--select", "flops-fp32", "--use-current-env",
         "--phases", "install,prepare", *extra],
        capture_output=True, text=True, timeout=300, env={**clean, **(env or {})},
    )  # fmt: skip
    (folder,) = list((base / "fleet").iterdir())
    return done, json.loads((folder / "fleet.json").read_text())


def test_a_python_without_milabenchs_dependencies_is_named_before_any_copy(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    done, doc = fleet(tmp_path, "--node-python", str(bare / "bin" / "python"))
    assert done.returncode == 1
    for node in doc["nodes"]:
        assert node["status"] == "install-failed", node
        assert "cannot import yaml" in node["reason"] and "pip install" in node["reason"]
        assert "--node-python" in node["reason"] and "fleet.python" in node["reason"]
        assert "code" not in node["phase_seconds"]  # nothing was copied
        checks = {f["check"]: f for f in node["doctor"]}
        assert checks["python_modules"]["severity"] == "fail"
        assert {"steal", "memory", "disk"} <= set(checks)


def test_a_node_whose_doctor_fails_is_reported_not_measured(tmp_path):
    env = {
        "PYTHONPATH": str(FAKES),
        "FAKE_PYNVML_DEVICES": json.dumps(
            {"count": 1, "devices": {"0": {"power_limit_mw": 490000}}}
        ),
        "MILABENCH_GPU_ARCH": "cpu",
    }
    done, doc = fleet(tmp_path, "--node-python", sys.executable, env=env)
    assert done.returncode == 1
    for node in doc["nodes"]:
        assert node["status"] == "run-failed", node
        assert node["reason"].startswith("milabench doctor: gpu0 power_limit: power limit 490 W")
        assert "--ignore-doctor" in node["reason"]
        assert "install" not in node["phase_seconds"]
    done, doc = fleet(
        tmp_path / "again", "--node-python", sys.executable, "--ignore-doctor", env=env
    )
    assert done.returncode == 0, done.stderr
    assert [n["status"] for n in doc["nodes"]] == ["ok", "ok"]
    assert all(
        any(f["check"] == "power_limit" and f["severity"] == "fail" for f in n["doctor"])
        for n in doc["nodes"]
    )
