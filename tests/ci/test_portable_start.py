"""The portable tier starts where Linux's own calls do not exist (macOS): pytest collects
the whole suite in a subprocess with a plugin that removes them before the session starts
(the ``os`` functions macOS lacks, the files of /proc and /sys) and logs every attempt
made from this repository's code; the workers' start (the worker count, the CPU group
left alone) is checked in this process with the same calls removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import concurrency
import cpuclass
import pytest

REPO = Path(__file__).resolve().parents[2]

# Loaded with ``-p`` before the conftest files (and in every xdist worker): what a Mac
# would not have. psutil is imported first, as its Linux module reads /proc at import
# (on macOS it has a module of its own).
WITHOUT_LINUX = """
import builtins, errno, io, os, sys, sysconfig

import psutil  # noqa: F401

GONE = ("sched_getaffinity", "sched_setaffinity", "sched_getscheduler", "sched_setscheduler",
        "sched_rr_get_interval", "pidfd_open", "memfd_create", "eventfd", "pipe2",
        "posix_fadvise", "posix_fallocate", "getxattr", "setxattr", "listxattr",
        "removexattr")
for name in GONE:
    if hasattr(os, name):
        delattr(os, name)

LOG = os.environ["MB_LINUX_LOG"]
REPO = os.environ["MB_REPO"] + os.sep
PATHS = sysconfig.get_paths()
STDLIB = PATHS["stdlib"] + os.sep
THIRD_PARTY = tuple(PATHS[k] + os.sep for k in ("purelib", "platlib"))


# The file of the first caller that is neither this plugin nor the standard library, if it
# is a file of the repository (third-party libraries keep fallbacks of their own).
def _ours():
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(THIRD_PARTY):
            return None
        if name != __file__ and not name.startswith(STDLIB) and not name.startswith("<"):
            return name if name.startswith(REPO) else None
        frame = frame.f_back
    return None


def _linux_only(path):
    try:
        text = os.fsdecode(path) if not isinstance(path, int) else ""
    except TypeError:
        return False
    return text == "/proc" or text.startswith(("/proc/", "/sys/")) or text == "/sys"


def _refuse(real):
    def call(path, *args, **kwargs):
        if _linux_only(path):
            if (caller := _ours()) is not None:
                with real_open(LOG, "a") as out:
                    out.write(f"{caller}: {real.__name__} {os.fsdecode(path)}\\n")
            raise FileNotFoundError(errno.ENOENT, "no such file (not Linux)", path)
        return real(path, *args, **kwargs)

    call.__name__ = real.__name__
    return call


real_open = io.open
builtins.open = io.open = _refuse(io.open)
for name in ("open", "stat", "lstat", "listdir", "scandir", "access"):
    setattr(os, name, _refuse(getattr(os, name)))
"""


def test_the_whole_suite_is_collected_without_linux(tmp_path: Path):
    (tmp_path / "without_linux.py").write_text(WITHOUT_LINUX)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CI"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        MB_LINUX_LOG=str(tmp_path / "linux-calls.log"),
        MB_REPO=str(REPO),
    )
    argv = [sys.executable, "-m", "pytest", "-p", "without_linux", "-p", "no:cacheprovider",
            "--collect-only", "-q", "tests"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " collected" in proc.stdout.splitlines()[-1], proc.stdout[-3000:]
    log = tmp_path / "linux-calls.log"
    assert (log.read_text().splitlines() if log.exists() else []) == []


@pytest.fixture
def without_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process without ``sched_getaffinity`` and with every cgroup call refused."""
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)

    def refused(*args, **kwargs):
        raise AssertionError("a cgroup call in the portable tier")

    for name in ("own_group", "make_background", "join_background", "foreground"):
        monkeypatch.setattr(cpuclass, name, refused)


def test_the_worker_count_without_sched_getaffinity(without_linux):
    assert concurrency.usable_cpus() == 8
    assert concurrency.pytest_xdist_auto_num_workers(None) == concurrency.MAX_WORKERS


@pytest.mark.parametrize("worker", [False, True])
def test_a_portable_session_starts_without_cgroups(without_linux, monkeypatch, worker):
    config = SimpleNamespace(option=SimpleNamespace(testrunuid=None, numprocesses=3))
    if worker:
        config.workerinput = {}
    monkeypatch.setattr(concurrency, "_system_tier", concurrency._system_tier)
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "portable-start")
    concurrency.configure(config, system_tier=False)
    with concurrency.machine_slot(concurrency.ALONE):  # no lock, no CPU group
        pass
    assert not any(concurrency._lock_dir().glob("milabench-tests-portable-start*"))
