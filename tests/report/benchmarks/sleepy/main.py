"""Tiny, steady benchmark for the report tests: a short compute + a fixed sleep per step.

The sleep dominates the step time, so the throughput is stable on a busy 2-core machine,
which is what the A/A test needs; `H6_SLOWDOWN=0.15` makes each step last 1/(1-0.15)
times longer, i.e. a planted 15% throughput drop the comparison must catch.
"""

import argparse
import os
import time

from benchkit.channel import DataWriter

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--step-ms", type=float, default=40.0)
parser.add_argument("--fail", action="store_true", help="raise after a few steps")
args = parser.parse_args()

slowdown = float(os.environ.get("H6_SLOWDOWN", "0") or 0)
sleep_s = args.step_ms / 1000.0 / (1.0 - slowdown)
writer = DataWriter()
loss = 2.0
for step in range(args.steps):
    t0 = time.perf_counter()
    acc = sum(i * i for i in range(2000))  # a little real work
    time.sleep(sleep_s)
    elapsed = time.perf_counter() - t0
    now = time.time()
    writer.write({"task": "train", "rate": args.batch / elapsed, "units": "items/s", "time": now})
    loss *= 0.97
    writer.write({"task": "train", "loss": loss, "time": now})
    if step % 5 == 0:
        load = os.getloadavg()[0]
        writer.write(
            {
                "task": "main",
                "time": now,
                "cpudata": {"load": load, "memory": [acc % 7 + 1 << 20, 8 << 30]},
            }
        )
    if args.fail and step == 3:
        writer.close()
        raise RuntimeError("planted failure for the report tests")
writer.close()
