"""Run a command next to a noisy neighbour: a process that burns CPUs for a second or two
every few seconds, the way another tenant of a shared host does.

Why: the hosts on which windows run to their cap without meeting their target are those
whose rates dip to 0.3-0.5x for a second or two at a time, every few seconds (another
tenant's bursts, a hypervisor's scheduling). This reproduces that on any machine, so
that the target-unreachable rule (docs/measurement.md) and the interference report
(docs/doctor.md) can be measured on demand: ``--busy`` seconds of a tight loop on
``--cores`` CPUs, then ``--idle`` seconds of rest, with a random jitter of ``--jitter``
of each period so that the bursts do not lock onto a benchmark's own rhythm. The
neighbour is a separate process named ``noisy-neighbour`` (what the interference report
names); it stops when the command ends, also on Ctrl-C.

Usage::

    python scripts/noisy_neighbour.py [--busy 1.5] [--idle 3] [--cores 1] [--seed 0] \\
        -- milabench run --config config/cpu.yaml

Exit code: the command's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time


def _burn(busy: float, idle: float, jitter: float, seed: int) -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(15, b"noisy-neighbour", 0, 0, 0)  # PR_SET_NAME: the name /proc shows
    except (OSError, AttributeError):
        pass
    rng = random.Random(seed)
    while True:
        end = time.monotonic() + busy * rng.uniform(1 - jitter, 1 + jitter)
        while time.monotonic() < end:
            pass
        time.sleep(idle * rng.uniform(1 - jitter, 1 + jitter))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=float, default=1.5, help="seconds of each burst")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds between bursts")
    parser.add_argument("--cores", type=int, default=1, help="CPUs each burst keeps busy")
    parser.add_argument("--jitter", type=float, default=0.3, help="relative random jitter")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    burners = [
        multiprocessing.Process(
            target=_burn, args=(args.busy, args.idle, args.jitter, args.seed + i), daemon=True
        )
        for i in range(max(1, args.cores))
    ]
    for b in burners:
        b.start()
    proc = subprocess.Popen(command, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        return proc.wait()
    finally:
        for b in burners:
            b.terminate()
            b.join(timeout=5)


if __name__ == "__main__":
    sys.exit(main())
