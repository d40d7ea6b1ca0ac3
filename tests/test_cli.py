"""The command line itself: every command answers --help, startup stays lazy and fast."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from milabench.cli import COMMANDS

PY = sys.executable


def milabench(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "milabench", *args], capture_output=True, text=True, timeout=120, **kwargs
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command: str) -> None:
    proc = milabench(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert f"milabench {command}" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_top_level_help_lists_every_command() -> None:
    proc = milabench("--help")
    assert proc.returncode == 0
    for command in COMMANDS:
        assert command in proc.stdout


def test_help_imports_nothing_heavy() -> None:
    """`--help` must not import the configuration engine, asyncssh, torch or blessed."""
    code = (
        "import sys, json, io, contextlib\n"
        "from milabench.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True)
    modules = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    for heavy in (
        "omegaconf",
        "yaml",
        "asyncssh",
        "torch",
        "blessed",
        "psutil",
        "milabench.config",
    ):
        assert heavy not in modules, f"{heavy} imported by --help"


@pytest.mark.quiet  # measures time on this machine
def test_help_is_fast() -> None:
    """A generous sanity bound; the real figure is in docs/performance.md."""
    best = min(_timed_help() for _ in range(3))
    assert best < 1.0, best


def _timed_help() -> float:
    t0 = time.perf_counter()
    # the command installed with the interpreter under test (not whatever PATH finds)
    command = str(Path(sys.executable).with_name("milabench"))
    proc = subprocess.run([command, "--help"], capture_output=True)
    assert proc.returncode == 0
    return time.perf_counter() - t0


def test_unknown_command_is_a_usage_error() -> None:
    proc = milabench("no-such-command")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr
