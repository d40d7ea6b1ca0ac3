"""Install time of one install group with the uv path and the virtualenv + pip path.

Usage::

    python scripts/perf_install.py [--config config/cpu.yaml] [--select torch] [--keep]

Both back-ends install the same selection into their own temporary base, in one run:
a first, untimed install warms each back-end's package cache, then ``milabench install
--force`` (a fresh environment) is timed end to end for each back-end (the whole
command: suite loading, environment creation, installation, benchkit copy, validation
imports). The per-step times come from the install logs (``runs/install.*/<group>.data``
start/end events). Prints both totals and their ratio; the figures are quoted in
docs/environments.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def milabench(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "milabench", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=1800)
    return time.perf_counter() - start, proc


def step_times(base: Path) -> dict[str, float]:
    """Seconds per install step (create/install/validate) summed over groups, last log."""
    logs = sorted((base / "runs").glob("install.*"))
    if not logs:
        return {}
    steps: dict[str, float] = {}
    for data in logs[-1].glob("*.data"):
        step, began = None, None
        for line in data.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "config":
                step = event["data"].get("step")
            elif event["event"] == "start":
                began = event["data"]["time"]
            elif event["event"] == "end" and began is not None:
                steps[step] = steps.get(step, 0.0) + event["data"]["time"] - began
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "config" / "cpu.yaml"))
    parser.add_argument("--select", default="torch", help="benchmarks/groups to install")
    parser.add_argument("--keep", action="store_true", help="keep the temporary bases")
    parser.add_argument("--no-warmup", action="store_true", help="skip the cache warm-up")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="perf_install."))
    results: dict[str, tuple[float, dict[str, float]]] = {}
    try:
        for backend in ("uv", "pip"):
            base = root / backend
            common = ["install", "--config", args.config, "--base", str(base),
                      "--select", args.select, "--backend", backend]
            if not args.no_warmup:
                seconds, proc = milabench(common)
                print(f"{backend}: warm-up install {seconds:.1f} s (rc {proc.returncode})",
                      flush=True)
            seconds, proc = milabench([*common, "--force"])
            if proc.returncode != 0:
                print(proc.stdout + proc.stderr, file=sys.stderr)
                return 1
            results[backend] = (seconds, step_times(base))
            steps = ", ".join(f"{k} {v:.1f} s" for k, v in results[backend][1].items())
            print(f"{backend}: forced install {seconds:.1f} s ({steps})", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"bases kept in {root}")
    uv, pip = results["uv"][0], results["pip"][0]
    print(f"\nselection {args.select!r} of {os.path.relpath(args.config, REPO)}, "
          f"warm caches, {os.cpu_count()} CPUs")
    print(f"uv               {uv:7.1f} s")
    print(f"virtualenv + pip {pip:7.1f} s")
    print(f"ratio pip/uv     {pip / uv:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
