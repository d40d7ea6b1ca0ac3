"""Fault fixture: measures, then reports a NaN loss, then asks to be stopped (`stop`).

The early stop must not excuse the NaN loss: the run fails and its report says so.
"""

import time

from benchkit.channel import DataWriter

writer = DataWriter()
for i in range(12):
    writer.write({"task": "train", "rate": 100.0 + i % 3, "units": "items/s", "time": time.time()})
    writer.write({"task": "train", "loss": 2.0 - i * 0.1})
writer.write({"task": "train", "loss": float("nan")})
writer.event("stop")
writer.flush()
deadline = time.monotonic() + 30
while time.monotonic() < deadline:  # slow to notice the end: the runner terminates it
    time.sleep(0.1)
