"""Fault fixture: kills itself with SIGKILL after reporting a rate."""

import os
import signal

from benchkit.channel import DataWriter

writer = DataWriter()
writer.write({"task": "train", "rate": 5.0, "units": "items/s"})
writer.flush()
os.kill(os.getpid(), signal.SIGKILL)
