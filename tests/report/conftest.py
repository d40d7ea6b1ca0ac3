"""Shared fixtures: real `milabench run` folders of the tiny suite in this folder.

The runs are made once per session (a few seconds each): `full` runs every benchmark of
`suite.yaml` (one of them fails on purpose), `aa1`/`aa2` are two identical runs of the
steady benchmarks, `slow` is the same with a planted 15% slowdown (H6_SLOWDOWN=0.15).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SUITE = HERE / "suite.yaml"
STEADY = "aa"


def milabench(
    *args: str, env: dict | None = None, timeout: int = 180
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def real_run(
    base: Path, name: str, *extra: str, env: dict | None = None, suite: Path = SUITE
) -> Path:
    proc = milabench("run", "--config", str(suite), "--base", str(base), "--use-current-env",
                     "--run-name", name, "--dash", "no", *extra, env=env)  # fmt: skip
    run_dir = base / "runs" / name
    if not run_dir.is_dir():
        pytest.fail(
            f"milabench run made no run folder:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return run_dir


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("h6base")
    return {
        "base": base,
        "full": real_run(base, "full"),
        "aa1": real_run(base, "aa1", "--select", STEADY),
        "aa2": real_run(base, "aa2", "--select", STEADY),
        "slow": real_run(base, "slow", "--select", STEADY, env={"H6_SLOWDOWN": "0.15"}),
    }
