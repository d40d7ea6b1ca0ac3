"""Real installs from this machine's pip sources: CPU torch (find-links) and voir (index).

The install contract at small scale: the torch group gets ``torch==2.13.0+cpu`` through
the forwarded pip find-links, a repeat install is an "up to date" no-op under 2 s, and
``milabench dev`` sees the group's torch.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from systemtools import MACHINE_PREFIX

from milabench.envs.pipconf import read_pip_settings

pytestmark = pytest.mark.slow


def local_torch_wheel() -> Path | None:
    for link in read_pip_settings().find_links:
        found = sorted(Path(link).glob("torch-2.13.0+cpu-*.whl")) if Path(link).is_dir() else []
        if found:
            return found[0]
    return None


def index_reachable(host: str = "pypi.org") -> bool:
    try:
        with socket.create_connection((host, 443), timeout=3):
            return True
    except OSError:
        return False


@pytest.fixture
def real(workdir: Path, real_env: dict[str, str], milabench_runner):
    """The torch suite with this machine's own pip settings (not the offline wheelhouse)."""
    return milabench_runner(workdir / "suite" / "torch-suite.yaml", workdir / "base", real_env)


@pytest.mark.quiet  # bounds the time of a no-op command
@pytest.mark.skipif(
    local_torch_wheel() is None,
    reason=MACHINE_PREFIX + "no torch 2.13.0+cpu wheel in pip's find-links (this workplace's)",
)
def test_torch_group(real):
    proc = real("install", "--select", "torchy", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed" in proc.stdout

    elapsed, proc = real.timed("install", "--select", "torchy")
    assert elapsed < 2.0
    assert "up to date" in proc.stdout

    proc = real(
        "dev",
        "torchy",
        "--",
        "python",
        "-c",
        "import sys, torch; print(sys.prefix, torch.__version__)",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(real.base / "venv" / "torch"), "2.13.0+cpu"]


@pytest.mark.skipif(not index_reachable(), reason="pypi.org unreachable (voir comes from it)")
def test_voirfile_brings_voir(real):
    proc = real("install", "--select", "voirbench", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bindir = real.base / "venv" / "voir" / "bin"
    assert (bindir / "voir").exists()
    proc = real("dev", "voirbench", "--", "python", "-c", "import voir, ptera; print('ok')")
    assert proc.stdout.strip() == "ok", proc.stderr
