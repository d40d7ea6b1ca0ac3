"""Healthy fixture: a small CPU loop reporting its throughput through benchkit."""

import argparse
import os
import time

from benchkit.channel import DataWriter

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--workers", type=int, default=1)
args = parser.parse_args()

writer = DataWriter()
for step in range(args.steps):
    t0 = time.perf_counter()
    total = sum(i * i for i in range(20000))
    elapsed = time.perf_counter() - t0
    writer.write(
        {"task": "train", "rate": 20000 / elapsed, "units": "items/s", "time": time.time()}
    )
    writer.write({"task": "train", "loss": 1.0 / (step + 1)})
writer.close()
print("workers", args.workers, "total", total, "devices", os.environ.get("CUDA_VISIBLE_DEVICES"))
