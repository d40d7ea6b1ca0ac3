"""Fixtures for the environment tests: real venvs, real uv/pip, offline wheels.

Tests must not depend on a package index, so a session-wide *wheelhouse* of tiny but
real wheels (a wheel is a documented zip: module + METADATA + WHEEL + RECORD) is built in
a temporary folder, and the commands run with pip's configuration replaced by
``PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheelhouse>`` (milabench forwards exactly these to uv).
The fixture benchmark folders are copied to ``tmp_path`` so that pin and prepare write
there, never into the repository. Commands run as real ``python -m milabench``
processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netindex import build_wheel

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheelhouse")
    build_wheel(folder, "mbtiny", "1.0")
    build_wheel(folder, "mbtiny", "2.0")
    build_wheel(folder, "mbdep", "1.0")
    build_wheel(folder, "mbdep", "2.0")
    build_wheel(folder, "mbuser", "1.0", requires=("mbdep<2",))
    return folder


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A copy of the fixture suites and benchmark folders, plus constraints/ and base/."""
    shutil.copytree(FIXTURES, tmp_path / "suite")
    constraints = tmp_path / "constraints"
    constraints.mkdir()
    (constraints / "cpu.txt").write_text("# test constraints\nmbtiny<3\n")
    return tmp_path


def clean_environ() -> dict[str, str]:
    """This process's environment without any pip/milabench setting that could leak in."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "MILABENCH_", "UV_", "VIRTUAL_ENV"))
    }


@pytest.fixture
def offline_env(wheelhouse: Path, workdir: Path) -> dict[str, str]:
    env = clean_environ()
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheelhouse),
        MILABENCH_INSTALL_CONSTRAINTS_DIR=str(workdir / "constraints"),
        MILABENCH_GPU_ARCH="cpu",
    )
    return env


class Milabench:
    """Runs ``python -m milabench`` in a subprocess with one suite, base and env."""

    def __init__(self, config: Path, base: Path, env: dict[str, str]) -> None:
        self.config = config
        self.base = base
        self.env = env

    def __call__(
        self, command: str, *args: str, timeout: float = 300, input: str | None = None
    ) -> subprocess.CompletedProcess:
        argv = [
            sys.executable,
            "-m",
            "milabench",
            command,
            "--config",
            str(self.config),
            "--base",
            str(self.base),
            *args,
        ]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=REPO,
            timeout=timeout,
            input=input,
        )

    def timed(self, command: str, *args: str, tries: int = 2):
        """(fastest wall time, last result) of an idempotent command run ``tries`` times.

        The machine running the tests may be shared: the best of two runs measures the
        command rather than a neighbour's burst of load.
        """
        best, proc = float("inf"), None
        for _ in range(tries):
            start = time.perf_counter()
            proc = self(command, *args)
            best = min(best, time.perf_counter() - start)
        return best, proc


@pytest.fixture
def mb(workdir: Path, offline_env: dict[str, str]) -> Milabench:
    return Milabench(workdir / "suite" / "suite.yaml", workdir / "base", offline_env)


@pytest.fixture
def milabench_runner():
    return Milabench


@pytest.fixture
def real_env() -> dict[str, str]:
    """This machine's pip settings (PIP_* kept), milabench variables removed."""
    env = clean_environ()
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    env["MILABENCH_GPU_ARCH"] = "cpu"
    return env
