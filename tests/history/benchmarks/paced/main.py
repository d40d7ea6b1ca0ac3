"""Tiny deterministic benchmark for the history tests: paced steps of `--step-ms`.

Each step sleeps until its deadline (start + k x period), so a late wake-up on a busy
machine lengthens one step and shortens the next: the rate (batch / step time) of a run
stays within about 1% of batch / period. A run with a step 11.1% longer has a rate 10%
lower: the planted regression the change-point tests look for.
"""

import argparse
import time

from benchkit.channel import DataWriter

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--step-ms", type=float, default=20.0)
args = parser.parse_args()

period = args.step_ms / 1000.0
writer = DataWriter()
start = prev = time.perf_counter()
for step in range(args.steps):
    deadline = start + (step + 1) * period
    time.sleep(max(0.0, deadline - time.perf_counter()))
    end = time.perf_counter()
    elapsed, prev = end - prev, end
    writer.write({"task": "train", "rate": args.batch / elapsed, "units": "items/s",
                  "time": time.time()})  # fmt: skip
writer.close()
