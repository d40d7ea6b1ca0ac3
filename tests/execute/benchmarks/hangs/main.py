"""Fault fixture: hangs forever, leaving an orphaned grandchild that escaped the group.

The child starts a grandchild that calls setsid() and ignores SIGTERM, then the child
exits, so the grandchild is reparented away from the benchmark's process tree.
"""

import subprocess
import sys
import time

GRANDCHILD = (
    "import os, signal, time\n"
    "os.setsid()\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('grandchild', os.getpid(), flush=True)\n"
    "time.sleep(3600)\n"
)
CHILD = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {GRANDCHILD!r}])\n"
subprocess.run([sys.executable, "-c", CHILD], check=True)
# A direct child that also ignores SIGTERM (still in the group).
subprocess.Popen(
    [
        sys.executable,
        "-c",
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(3600)",
    ]
)
print("hanging", flush=True)
while True:
    time.sleep(1)
