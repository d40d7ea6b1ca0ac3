"""Run the `milabench` command as a user would, from a test."""

from __future__ import annotations

import os
import subprocess
import sys


def milabench(
    *args: str, env: dict | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """``python -m milabench ARGS``: the test process's own ``MILABENCH_*`` variables
    dropped (a developer's shell must not change what a test sees), the live dashboard
    off, then ``env`` added; output captured as text, no stdin."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        env={**base, "MILABENCH_DASH": "no", **(env or {})},
    )
