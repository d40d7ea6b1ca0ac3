"""Helpers for the configuration tests (imported by name: conftest puts this folder on
sys.path, since pytest runs with --import-mode=importlib)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SUITES = Path(__file__).parent / "suites"
REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None):
    """Run the real command line in a subprocess (no MILABENCH_* from the caller)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=full_env,
        timeout=60,
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
