"""Run the `milabench` command as a user would, from a test."""

from __future__ import annotations

import os
import subprocess
import sys

# The `cpu.total_count` option: `{cpu_per_gpu}` (each benchmark process's threads,
# OMP_NUM_THREADS) is 1. Tests run three workers on the CPUs of a small machine, where a
# torch process of more threads waits in every parallel region for a peer that is not
# scheduled (tests/conftest.py); no test through here measures a thread's speed-up.
ONE_CPU = {"MILABENCH_CPU_TOTAL_COUNT": "1"}


def milabench(
    *args: str, env: dict | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """``python -m milabench ARGS``: the test process's own ``MILABENCH_*`` variables
    dropped (a developer's shell must not change what a test sees), the live dashboard
    off, one CPU per benchmark process (`ONE_CPU`), then ``env`` added; output captured
    as text, no stdin."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    return subprocess.run(
        [sys.executable, "-m", "milabench", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        env={**base, "MILABENCH_DASH": "no", **ONE_CPU, **(env or {})},
    )
