"""The NVIDIA driver against the CUDA runtime of the pinned wheels:
one line naming both versions, before an install and before a run. The driver is the
fake `pynvml` of tests/fakes (550.54.15, CUDA 12.4), the only mock: no GPU here. A runtime
of the driver's CUDA major version runs (minor-version compatibility)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakenvml import fake_pynvml

from milabench.config.entry import Entry
from milabench.envs import MARKER_NAME, driver
from milabench.envs.ready import ensure_ready
from milabench.errors import EnvironmentMissing

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes"
INFO = {"driver_version": "550.54.15", "cuda_driver_version": "12040"}


def test_versions_from_pins_and_from_an_installed_environment(tmp_path):
    pins = tmp_path / "requirements.cuda.txt"
    pins.write_text("torch==2.13.0\n    # via x\nnvidia-cuda-runtime==13.0.96\n")
    assert driver.required_by_pins([tmp_path / "absent.txt", pins]) == (
        (13, 0),
        "nvidia-cuda-runtime==13.0.96",
    )
    old = tmp_path / "old.txt"
    old.write_text("nvidia-cuda-runtime-cu12==12.4.127\n")
    assert driver.required_by_pins([old])[0] == (12, 4)
    site = tmp_path / "site-packages"
    (site / "nvidia_cuda_runtime_cu12-12.6.77.dist-info").mkdir(parents=True)
    assert driver.required_by_venv(site) == ((12, 6), "nvidia_cuda_runtime_cu12-12.6.77")
    assert driver.driver_cuda(INFO) == (12, 4)
    driver.check(((12, 4), "x"), INFO, "ok")  # equal is enough
    driver.check(((12, 8), "x"), INFO, "ok")  # a newer minor: minor-version compatibility
    driver.check(None, INFO, "ok")  # nothing pinned (CPU build, ROCm...)
    driver.check(((13, 0), "x"), {"driver_version": "fake"}, "ok")  # unknown ceiling
    with pytest.raises(EnvironmentMissing) as err:
        driver.check(((13, 0), "nvidia-cuda-runtime==13.0.96"), INFO, "install group torch")
    assert str(err.value) == (
        "install group torch: the CUDA 13.0 runtime (nvidia-cuda-runtime==13.0.96) needs "
        "NVIDIA driver 580.65.06 or newer; driver 550.54.15 supports CUDA 12.4 at most; "
        "update the driver, or install the build it runs (option install.cuda_build=auto, "
        "docs/environments.md)"
    )


def test_install_stops_before_installing_with_one_line(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "main.py").write_text("")
    (bench / "requirements.in").write_text("torch\n")
    (bench / "requirements.cuda.txt").write_text(
        (REPO / "benchmarks" / "flops" / "requirements.cuda.txt").read_text()
    )
    suite = tmp_path / "suite.yaml"  # the CUDA 13 build named explicitly, on a CUDA 12.4 driver
    suite.write_text(f"bench: {{definition: {bench}, install_variant: cuda}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MILABENCH_", "CUDA_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "milabench", "install", "--config", str(suite),
         "--base", str(tmp_path / "base")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("milabench: error: install group bench: the CUDA 13.0 runtime")
    assert "driver 550.54.15 supports CUDA 12.4 at most" in lines[0]
    assert not (tmp_path / "base" / "venv" / "bench").exists()  # nothing was installed


@pytest.fixture
def fake_nvml(monkeypatch):
    from milabench.machine.accelerators import detect

    for module in fake_pynvml(monkeypatch):
        assert detect(refresh=True).arch == "cuda"
        yield module


def test_run_checks_the_installed_runtime(tmp_path, fake_nvml):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / MARKER_NAME).write_text("{}")
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    dist = site / "site-packages" / "nvidia_cuda_runtime-13.0.96.dist-info"
    dist.mkdir(parents=True)
    entry = Entry.from_mapping({"name": "bench", "dirs": {"venv": str(venv)}})
    with pytest.raises(EnvironmentMissing, match=r"^bench: environment .*: the CUDA 13\.0 runtime"):
        ensure_ready(entry)
    dist.rename(dist.with_name("nvidia_cuda_runtime_cu12-12.4.127.dist-info"))
    ensure_ready(entry)  # a CUDA 12.4 build runs on this driver
