"""Fixture for timeouts and interruption: prints progress until killed."""

import time

from benchkit.channel import DataWriter

writer = DataWriter(flush_interval=0)
i = 0
while True:
    writer.write({"task": "train", "rate": 1.0, "units": "items/s"})
    print("tick", i, flush=True)
    i += 1
    time.sleep(0.2)
