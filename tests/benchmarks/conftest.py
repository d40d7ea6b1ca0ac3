"""Helpers to run benchmark scripts for real, as the orchestrator would.

A benchmark reports through the data channel: a real pipe whose write end is announced
by ``DATA_FD`` (read by a thread so that a chatty benchmark never blocks on a full pipe),
or records smuggled in standard output (``DATA_FD=1``, what torchrun workers use).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchkit.channel import SmuggleDecoder

from . import forkrun
from .smokerun import SmokeRun, smoke_run

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


@dataclass
class BenchRun:
    returncode: int
    stdout: str
    stderr: str
    records: list[dict] = field(default_factory=list)

    def rates(self, task: str = "train") -> list[dict]:
        return [r for r in self.records if r.get("task") == task and "rate" in r]

    def losses(self) -> list[float]:
        return [r["loss"] for r in self.records if "loss" in r]

    def events(self, name: str) -> list[dict]:
        return [r for r in self.records if r.get("$event") == name]


def bench_env(stop: int = 4, skip: int = 1, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("MILABENCH_CONFIG", "DATA_FD"):
        env.pop(key, None)
    env.update(
        BENCHKIT_STOP=str(stop),
        BENCHKIT_SKIP=str(skip),
        # exact step counts: these tests check each benchmark's loop, not the window
        BENCHKIT_MEASURE_WARMUP_MIN="0",
        BENCHKIT_MEASURE_WARMUP_MAX="0",
        BENCHKIT_MEASURE_MIN="0",
        BENCHKIT_MEASURE_MAX="0",
        BENCHKIT_GPU_POLL="0",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    env.update(extra)
    return env


def run_with_pipe(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 180
) -> BenchRun:
    """Run ``argv`` with a real data pipe announced by ``DATA_FD`` (voir reads it too):
    ``python SCRIPT ...`` in a child of the worker's fork server, which imported torch
    once (forkrun.py), where that is the same as a fresh interpreter."""
    forked = forkrun.run(argv, env, cwd, timeout)
    if forked is not None:
        records = [json.loads(line) for line in forked["data"].splitlines() if line.strip()]
        return BenchRun(forked["returncode"], forked["stdout"], forked["stderr"], records)
    read_end, write_end = os.pipe()
    env = dict(env, DATA_FD=str(write_end))
    chunks: list[bytes] = []

    def drain() -> None:
        with os.fdopen(read_end, "rb") as reader:
            for chunk in iter(lambda: reader.read1(65536), b""):
                chunks.append(chunk)

    reader_thread = threading.Thread(target=drain, daemon=True)
    reader_thread.start()

    try:
        proc = subprocess.run(
            argv,
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            pass_fds=(write_end,),
        )
    finally:
        os.close(write_end)
    reader_thread.join(timeout=30)
    text = b"".join(chunks).decode()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return BenchRun(proc.returncode, proc.stdout, proc.stderr, records)


def run_plain(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 180
) -> subprocess.CompletedProcess:
    """`subprocess.run` of ``argv`` with its output captured as text: a child of the
    worker's fork server where that is the same as a fresh interpreter (forkrun.py)."""
    forked = forkrun.run(argv, env, cwd, timeout, pipe=False)
    if forked is None:
        return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    return subprocess.CompletedProcess(argv, forked["returncode"], forked["stdout"],
                                       forked["stderr"])  # fmt: skip


def run_smuggled(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 180) -> BenchRun:
    """Run with ``DATA_FD=1``: records come hidden in standard output (`run_plain`)."""
    proc = run_plain(argv, dict(env, DATA_FD="1"), cwd, timeout)
    plain, lines = SmuggleDecoder().feed(proc.stdout)
    return BenchRun(proc.returncode, plain, proc.stderr, [json.loads(x) for x in lines])


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture(scope="session")
def smoke(tmp_path_factory) -> SmokeRun:
    """The standard smoke suite run once per session, shared by the workers (smokerun.py):
    a file with a test that asks for it is handed out after the ordinary files
    (`concurrency.SMOKE_FIXTURE`), so that it starts once the run is made."""
    return smoke_run(tmp_path_factory)


@pytest.fixture(scope="session", autouse=True)
def _fork_server():
    """The worker's fork server (forkrun.py) ends with the session."""
    yield
    forkrun.stop()
