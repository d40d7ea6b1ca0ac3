"""Monitored fixture: benchkit's background monitor samples while a CPU loop reports its
throughput. With ``MILABENCH_FAKE_GPUS=cuda:1:1000:lost@3`` the fake accelerator fails
on its third sample, as NVML does when a GPU falls off the bus."""

import time

from benchkit.channel import DataWriter
from benchkit.monitors import Monitor

writer = DataWriter()
with Monitor(writer, 0.05):
    for _ in range(12):
        t0 = time.perf_counter()
        total = sum(i * i for i in range(20000))
        time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        writer.write(
            {"task": "train", "rate": 20000 / elapsed, "units": "items/s", "time": time.time()}
        )
writer.close()
print("total", total)
