"""Helpers for benchkit tests: a real pipe reader and a clean environment."""

import json
import os
import threading

import pytest


class PipeReader:
    """Read end of a real pipe, drained by a thread so writers never block."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self.read_fd, 65536):
            self._chunks.append(chunk)

    def close_writer(self) -> None:
        if self.write_fd is not None:
            os.close(self.write_fd)
            self.write_fd = None

    def text(self) -> str:
        self.close_writer()
        self._thread.join(timeout=30)
        os.close(self.read_fd)
        return b"".join(self._chunks).decode("utf-8")

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.text().splitlines()]


@pytest.fixture
def pipe():
    reader = PipeReader()
    yield reader
    reader.close_writer()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Tests decide themselves what the orchestrator would have set."""
    for name in list(os.environ):
        if name.startswith(("BENCHKIT_", "MILABENCH_")) or name in (
            "DATA_FD",
            "RANK",
            "WORLD_SIZE",
            "CUDA_VISIBLE_DEVICES",
        ):
            monkeypatch.delenv(name, raising=False)
    import benchkit.options

    monkeypatch.setattr(benchkit.options, "_cached", None)


def run_voir_process(argv: list[str], env: dict[str, str], cwd) -> tuple[int, str, str, list[dict]]:
    """``python -m voir ARGV`` with a real data pipe announced by ``DATA_FD`` (as the
    orchestrator gives it): exit code, stdout, stderr, and the records (every line whole,
    valid JSON)."""
    import subprocess
    import sys

    pipe = PipeReader()
    proc = subprocess.Popen(
        [sys.executable, "-m", "voir", *argv],
        pass_fds=[pipe.write_fd],
        env=dict(env, DATA_FD=str(pipe.write_fd)),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    pipe.close_writer()
    out, err = proc.communicate(timeout=120)
    records = [json.loads(line) for line in pipe.text().splitlines()]
    return proc.returncode, out.decode(), err.decode(), records
