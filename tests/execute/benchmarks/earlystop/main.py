"""Early-stop fixture: reports its budget, signals `stop`, then keeps running."""

import time

from benchkit.channel import DataWriter

writer = DataWriter()
for i in range(3):
    writer.write({"task": "train", "rate": 50.0, "units": "items/s"})
    writer.write({"task": "early_stop", "progress": [i + 1, 3]})
writer.event("stop")
writer.flush()
while True:  # a benchmark slow to notice the end: the runner must terminate it
    time.sleep(1)
