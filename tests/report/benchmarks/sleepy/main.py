"""Tiny, steady benchmark for the report tests: paced steps of a fixed period.

Each step does a little real work, then sleeps until its deadline (start + k x period), so a
late wake-up (the machine is shared and busy) lengthens one step and shortens the next:
the per-step durations scatter around the period instead of drifting with the load, which
is what the A/A test needs. `H6_SLOWDOWN=0.15` makes the period 1/(1-0.15) times longer,
i.e. a planted 15% throughput drop the comparison must catch. The rates are real
measurements (batch / elapsed wall time of the step).
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
start = prev = last_wall = time.perf_counter()
last_cpu = time.process_time()
for step in range(args.steps):
    sum(i * i for i in range(2000))  # a little real work
    deadline = start + (step + 1) * sleep_s
    time.sleep(max(0.0, deadline - time.perf_counter()))
    end = time.perf_counter()
    elapsed, prev = end - prev, end
    now = time.time()
    writer.write({"task": "train", "rate": args.batch / elapsed, "units": "items/s", "time": now})
    loss *= 0.97
    writer.write({"task": "train", "loss": loss, "time": now})
    if step % 5 == 0:  # host sample: this process's CPU share and the host's memory
        cpu, wall = time.process_time(), time.perf_counter()
        load = 100.0 * (cpu - last_cpu) / max(wall - last_wall, 1e-9)
        last_cpu, last_wall = cpu, wall
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
        used = total - os.sysconf("SC_AVPHYS_PAGES") * page
        writer.write(
            {"task": "main", "time": now, "cpudata": {"load": load, "memory": [used, total]}}
        )
    if args.fail and step == 3:
        writer.close()
        raise RuntimeError("planted failure for the report tests")
writer.close()
