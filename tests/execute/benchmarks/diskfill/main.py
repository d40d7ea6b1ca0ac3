"""Fault fixture: writes far more than a small disk holds (records, then stdout)."""

import json
import os
import time

fd = int(os.environ["DATA_FD"])
pad = "x" * 900
for i in range(4000):  # ~4 MB of records on the data channel
    os.write(
        fd,
        (
            json.dumps({"task": "train", "rate": 1.0 + i, "units": "items/s", "pad": pad}) + "\n"
        ).encode(),
    )
    if i % 200 == 0:
        time.sleep(0.01)
print("done filling the disk")
