"""benchkit works in an environment that has only the standard library."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CODE = textwrap.dedent(
    """
    import sys, time
    import benchkit, benchkit.channel, benchkit.options, benchkit.timing, benchkit.monitors
    import benchkit.stopping
    assert "torch" not in sys.modules and "psutil" not in sys.modules
    from benchkit.monitors import Monitor
    from benchkit.timing import TimedIterator
    it = TimedIterator(
        [[1, 2, 3]] * 10, stop=5, skip=1, interval=3600,
        measure={"warmup_min": 0, "warmup_max": 0, "min": 0, "max": 0},
    )
    it._want_monitor = True
    it.gpu_poll = 0.01
    for _ in it:
        time.sleep(0.01)
    print(Monitor(it.writer).backends["host"], it.done)
    """
)


def test_import_and_measure_without_site_packages():
    env = dict(os.environ, PYTHONPATH=str(ROOT), MILABENCH_DATA_STDOUT="1")
    env.pop("DATA_FD", None)
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _CODE],  # -S: no site-packages (no torch, no psutil)
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "ProcSampler True"  # the /proc fallback of the monitor
    records = [json.loads(x) for x in lines[:-1]]
    assert len([r for r in records if "rate" in r]) == 5
    assert any("cpudata" in r for r in records) and any("process" in r for r in records)
