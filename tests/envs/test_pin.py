"""`milabench pin`: uv pip compile per install group, a shared lock, forwarded sources."""

from __future__ import annotations

import subprocess
import sys


def pins(path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==")
            out[name.strip()] = version.strip()
    return out


def test_pin_shares_versions_within_a_group(mb):
    mb.config = mb.config.parent / "pin-suite.yaml"
    proc = mb("pin")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    p1 = mb.config.parent / "p1" / "requirements.cpu.txt"
    p2 = mb.config.parent / "p2" / "requirements.cpu.txt"
    assert pins(p1) == {"mbuser": "1.0", "mbdep": "1.0"}
    # alone, p2 would resolve mbdep to 2.0; the group lock keeps it at p1's 1.0
    assert pins(p2) == {"mbdep": "1.0"}
    assert "milabench pin --variant cpu" in p2.read_text()
    (logs,) = sorted((mb.base / "runs").glob("pin.*"))
    assert pins(logs / "shared.lock.txt") == {"mbuser": "1.0", "mbdep": "1.0"}


def test_pin_then_install_uses_the_pinned_files(mb):
    mb.config = mb.config.parent / "pin-suite.yaml"
    assert mb("pin").returncode == 0
    proc = mb("install")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    python = mb.base / "venv" / "shared" / "bin" / "python"
    out = subprocess.run(
        [str(python), "-c", "import mbdep; print(mbdep.__version__)"],
        capture_output=True,
        text=True,
    ).stdout
    assert out == "1.0\n"


def test_pin_honours_constraints_and_variant(mb, workdir):
    (workdir / "constraints" / "rocm.txt").write_text("mbtiny==1.0\n")
    proc = mb("pin", "--select", "tiny-a", "--variant", "rocm")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert pins(mb.config.parent / "tiny-a" / "requirements.rocm.txt") == {"mbtiny": "1.0"}
    (workdir / "constraints" / "cpu.txt").write_text("mbtiny>1.5\n")
    proc = mb("pin", "--select", "tiny-a")
    assert pins(mb.config.parent / "tiny-a" / "requirements.cpu.txt") == {"mbtiny": "2.0"}


def test_pin_failure_names_the_package(mb):
    proc = mb("pin", "--select", "broken")
    assert proc.returncode == 1
    assert "gamma: failed" in proc.stdout and "nonexistent-pkg-xyz" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_pin_help_mentions_variant():
    proc = subprocess.run(
        [sys.executable, "-m", "milabench", "pin", "--help"], capture_output=True, text=True
    )
    assert "--variant" in proc.stdout and "--arch" in proc.stdout
