"""Install time of one install group with the uv path and the virtualenv + pip path.

Usage::

    python scripts/perf_install.py [--config config/cpu.yaml] [--select torch] [--keep]

Both back-ends install the same selection, in one run: a first install into a scratch
base warms each back-end's package cache; then, timed end to end (the whole command:
suite loading, environment creation, installation, benchkit copy, validation imports),
an install into a fresh base and a ``--force`` reinstall of it. The per-step times come from the install logs (``runs/install.*/<group>.data``
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
    proc = subprocess.run(
        [sys.executable, "-m", "milabench", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=1800,
    )
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
    results: dict[str, dict[str, float]] = {}
    try:
        for backend in ("uv", "pip"):
            results[backend] = {}
            for label, base, extra in (
                ("warm-up", root / f"{backend}-warm", []),
                ("fresh", root / backend, []),
                ("force", root / backend, ["--force"]),
            ):
                if label == "warm-up" and args.no_warmup:
                    continue
                seconds, proc = milabench(
                    [
                        "install",
                        "--config",
                        args.config,
                        "--base",
                        str(base),
                        "--select",
                        args.select,
                        "--backend",
                        backend,
                        *extra,
                    ]
                )
                if proc.returncode != 0:
                    print(proc.stdout + proc.stderr, file=sys.stderr)
                    return 1
                results[backend][label] = seconds
                steps = ", ".join(f"{k} {v:.1f} s" for k, v in step_times(base).items())
                print(f"{backend:3s} {label:8s} {seconds:6.1f} s  ({steps})", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"bases kept in {root}")
    print(f"\nselection {args.select!r} of {args.config}, warm caches, {os.cpu_count()} CPUs")
    print(f"{'':18s} {'fresh base':>10s} {'--force':>10s}")
    for backend, name in (("uv", "uv"), ("pip", "virtualenv + pip")):
        r = results[backend]
        print(f"{name:18s} {r['fresh']:8.1f} s {r['force']:8.1f} s")
    uv, pip = results["uv"], results["pip"]
    print(
        f"{'ratio pip/uv':18s} {pip['fresh'] / uv['fresh']:8.2f} x "
        f"{pip['force'] / uv['force']:8.2f} x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
