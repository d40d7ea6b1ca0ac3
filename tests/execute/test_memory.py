"""Peak memory of a benchmark's process tree: real processes through the real runner."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from milabench.execute import memory
from milabench.execute.runner import run_specs, run_specs_sync, sampling_interval
from milabench.plan.spec import ProcessSpec

from .conftest import Collect

MiB = 2**20

# A parent that starts two children; each allocates and touches 100 MiB, then sleeps.
TREE = """
import subprocess, sys, time
child = "b = bytearray(100 * 2**20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\n"
child += "import time; time.sleep(2)"
kids = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(2)]
for k in kids:
    k.wait()
"""


def tree_records(sink, tag):
    return [
        e["data"]
        for t, e in sink.events
        if t == tag and e["event"] == "data" and "process_tree" in e["data"]
    ]


def spec(tag, code, **kwargs):
    return ProcessSpec(tag=[tag], argv=[sys.executable, "-c", code], entry={"name": tag}, **kwargs)


def test_tree_peak_counts_every_descendant():
    sink = Collect()
    (outcome,) = run_specs_sync([spec("tree", TREE)], [sink])
    assert outcome.return_code == 0
    records = tree_records(sink, "tree")
    assert len(records) >= 2  # at least one while it ran, and the final one
    events = [e for t, e in sink.events if t == "tree"]
    final = events[-2]
    assert events[-1]["event"] == "end"
    assert final["event"] == "data" and final["pipe"] == "data"
    tree = final["data"]["process_tree"]
    assert final["data"]["task"] == "main" and abs(final["data"]["time"] - time.time()) < 60
    assert tree["peak_rss"] >= 200 * MiB
    assert tree["peak_processes"] >= 3 and max(r["process_tree"]["processes"] for r in records) >= 3
    peaks = [r["process_tree"]["peak_rss"] for r in records]
    assert peaks == sorted(peaks) and peaks[-1] == tree["peak_rss"]
    assert all(r["process_tree"]["rss"] <= r["process_tree"]["peak_rss"] for r in records)


@pytest.mark.quiet  # a 0.2 s process must be sampled before it ends
def test_short_process_gets_its_final_record():
    sink = Collect()
    (outcome,) = run_specs_sync([spec("short", "import time; time.sleep(0.2)")], [sink])
    assert outcome.return_code == 0
    events = [e for t, e in sink.events if t == "short"]
    assert [e["event"] for e in events][-2:] == ["data", "end"]
    tree = events[-2]["data"]["process_tree"]
    assert tree["peak_rss"] > 1 * MiB and tree["processes"] >= 1


def test_sampling_can_be_turned_off(monkeypatch):
    sink = Collect()
    run_specs_sync([spec("off", "pass")], [sink], memory_interval=None)
    assert tree_records(sink, "off") == []
    monkeypatch.setenv("MILABENCH_RUN_MEMORY_INTERVAL", "0")
    assert sampling_interval(None) is None
    monkeypatch.setenv("MILABENCH_RUN_MEMORY_INTERVAL", "0.5")
    assert sampling_interval({}) == 0.5


def test_early_stop_and_timeout_still_get_the_final_record():
    stop = (
        "import json, os, time\n"
        "fd = int(os.environ['DATA_FD'])\n"
        "os.write(fd, (json.dumps({'$event': 'stop', '$data': {}}) + '\\n').encode())\n"
        "time.sleep(30)\n"
    )
    sink = Collect()
    outcomes = asyncio.run(
        run_specs(
            [spec("stop", stop), spec("slow", "import time; time.sleep(30)", timeout=0.5)],
            [sink],
            grace=0.5,
            early_stop_grace=0.2,
        )
    )
    assert outcomes[0].early_stop and outcomes[1].return_code == "TIMEOUT"
    for tag in ("stop", "slow"):
        events = [e for t, e in sink.events if t == tag]
        assert events[-1]["event"] == "end"
        assert events[-2]["data"]["process_tree"]["peak_rss"] > 0


def test_sampling_a_process_that_exits_never_raises():
    # A tree whose members come and go quickly, sampled as fast as possible.
    churn = (
        "import subprocess, sys\n"
        "for _ in range(20):\n"
        "    subprocess.Popen([sys.executable, '-c', 'pass']).wait()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", churn])
    sampler = memory.TreeSampler(proc.pid)
    seen = 0
    while proc.poll() is None:
        sample = sampler.sample()
        seen = max(seen, sample.processes)
    proc.wait()
    gone = sampler.sample()  # the leader is reaped: nothing left, and no exception
    assert gone.processes == 0 and gone.rss == 0
    assert seen >= 1 and sampler.peak_rss > 0
    assert sampler.record()["process_tree"]["peak_rss"] == sampler.peak_rss
    # A zombie (exited, not reaped) counts for nothing; a pid that never existed neither.
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    while memory._rss(zombie.pid):
        time.sleep(0.01)
    assert memory.TreeSampler(zombie.pid).sample().processes == 0
    zombie.wait()
    assert memory.TreeSampler(2**22 + 12345).sample().processes == 0


def test_tree_pids_walks_the_whole_tree():
    code = (
        "import subprocess, sys, time\n"
        "inner = 'import subprocess, sys, time; "
        'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"]); '
        "time.sleep(3)'\n"
        "subprocess.Popen([sys.executable, '-c', inner]); time.sleep(3)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(memory.tree_pids(proc.pid)) < 3:
            time.sleep(0.05)
        pids = memory.tree_pids(proc.pid)
        assert pids[0] == proc.pid and len(pids) == 3 and len(set(pids)) == 3
        assert sorted(pids[1:]) == sorted(memory._tree_pids_psutil(proc.pid)[1:])
        assert os.getpid() not in pids
    finally:
        for pid in memory.tree_pids(proc.pid)[::-1]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        proc.wait()
