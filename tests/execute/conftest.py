"""Helpers for the execution tests: hand-built entries, a marker to find our processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from milabench.events import read_events

HERE = Path(__file__).resolve().parent
BENCHMARKS = HERE / "benchmarks"
MARK_VAR = "MILABENCH_TEST_MARK"


def cpu_system(**extra) -> dict:
    system = {
        "arch": "cpu",
        "gpu": {"count": 0, "capacity": None},
        "cpu": {"count": 4},
        "nodes": [{"name": "local", "ip": "127.0.0.1", "user": "me", "main": True, "local": True}],
        "options": {},
    }
    system.update(extra)
    return system


def make_entry(
    name: str, base: Path, *, definition: str | Path | None = None, mark: str = "", **fields
) -> dict:
    """A resolved entry as `milabench.config.load_suite` would produce it."""
    entry = {
        "name": name,
        "tag": [name],
        "group": name,
        "install_group": name,
        "install_variant": "cpu",
        "definition": str(definition or BENCHMARKS / name),
        "enabled": True,
        "weight": 1.0,
        "tags": [],
        "plan": {"method": "per_gpu"},
        "argv": {},
        "max_duration": 30,
        "voir": {"options": {}},
        "env": {MARK_VAR: mark} if mark else {},
        "dirs": {
            "base": str(base),
            "venv": str(base / "venv" / name),
            "data": str(base / "data"),
            "runs": str(base / "runs"),
            "extra": str(base / "extra" / name),
            "cache": str(base / "cache"),
            "code": str(definition or BENCHMARKS / name),
        },
        "use_current_env": True,
    }
    entry.update(fields)
    return entry


def marked_processes(mark: str) -> list[int]:
    """Living processes whose environment carries ``MILABENCH_TEST_MARK=mark``."""
    needle = f"{MARK_VAR}={mark}".encode()
    found = []
    for pid in psutil.pids():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read() and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    found.append(pid)
        except (OSError, psutil.Error):
            continue
    return found


def wait_no_marked(mark: str, timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    left = marked_processes(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = marked_processes(mark)
    return left


@pytest.fixture
def mark():
    """A unique marker; afterwards, kill anything still carrying it (and fail)."""
    value = uuid.uuid4().hex
    yield value
    for pid in marked_processes(value):
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


PYTHON = sys.executable


class Collect:
    """A sink that keeps every event it is given, for tests to look at."""

    def __init__(self):
        self.events = []

    def on_event(self, tag, event):
        self.events.append((tag, event))

    def close(self):
        pass


SUITE = HERE / "suites" / "faults.yaml"  # the command-line tests' suite


def milabench_argv(*args: str, base: Path, current_env: bool = True) -> list[str]:
    """``python -m milabench ARGS``; ``run`` and ``matrix`` on `SUITE` and ``base``, in
    the current environment unless ``current_env`` is false."""
    cmd = [sys.executable, "-m", "milabench", *args]
    if args and args[0] in ("run", "matrix"):
        cmd += ["--config", str(SUITE), "--base", str(base)]
        cmd += ["--use-current-env"] if current_env else []
    return cmd


def milabench(*args, base, mark="", check=None, timeout=120, env=None, current_env=True):
    """`milabench_argv` run to its end, its processes marked with ``mark``, the dashboard
    off; ``check``: the exit code it must have."""
    env = dict(env or os.environ, MILABENCH_TEST_MARK=mark or "none", MILABENCH_DASH="no")
    cmd = milabench_argv(*args, base=base, current_env=current_env)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if check is not None:
        assert proc.returncode == check, proc.stdout + proc.stderr
    return proc


def data_events(path):
    """The events of a run file, every line checked to be strict JSON first."""
    for line in path.read_text().splitlines():
        json.loads(line)
    return list(read_events(path))
