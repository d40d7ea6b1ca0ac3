"""`milabench run` from the command line, where the test bounds time on this machine
(a signal's grace, a hung benchmark's timeout, the gap between two benchmarks): these
are quiet (tests/concurrency.py). The other command-line tests are in test_cli_run.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from .conftest import data_events, marked_processes, milabench, milabench_argv, wait_no_marked


@pytest.mark.slow
def test_sigint_during_run(tmp_path, mark):
    env = dict(os.environ, MILABENCH_TEST_MARK=mark, MILABENCH_DASH="no")
    cmd = milabench_argv("run", "--select", "interrupt,noop", "--run-name", "sigint", base=tmp_path)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    data = tmp_path / "runs" / "sigint" / "slowstart.D0.data"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if data.exists() and '"event": "data"' in data.read_text():
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the benchmark never reported")
    assert marked_processes(mark)  # the benchmark is running
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - t0
    assert proc.returncode == 130, out + err
    assert wait_no_marked(mark, timeout=0.1) == []
    assert took < 5
    events = data_events(data)
    assert events[-1]["event"] == "end" and events[-1]["data"]["return_code"] == "INTERRUPTED"
    assert sum(e["event"] == "data" for e in events) >= 1
    assert "slowstart" in out  # the partial report was printed
    assert "Traceback" not in err
    # noop (after slowstart in suite order) never started
    assert not (tmp_path / "runs" / "sigint" / "noop.D0.data").exists()


@pytest.mark.slow
def test_fault_suite_through_the_command_line(tmp_path, mark):
    """suites/faults.yaml, run as a user would; the option run.grace from the env."""
    env = dict(os.environ, MILABENCH_RUN_GRACE="1")
    t0 = time.monotonic()
    proc = milabench(
        "run",
        "--select",
        "raises,hangs,sigkill,garbage,nanloss,healthy,earlystop,needs-nodes",
        "--run-name",
        "faults",
        base=tmp_path,
        mark=mark,
        env=env,
        check=1,
    )
    took = time.monotonic() - t0
    run = tmp_path / "runs" / "faults"
    codes = {}
    for path in sorted(run.glob("*.data")):
        events = data_events(path)  # every line strict JSON
        assert events[0]["event"] == "config" and events[-1]["event"] == "end"
        codes[path.name[: -len(".data")]] = events[-1]["data"]["return_code"]
    assert codes == {
        "raises.D0": 1,
        "hangs.D0": "TIMEOUT",
        "sigkill.D0": -9,
        "garbage.D0": 0,
        "nanloss.D0": 0,
        "healthy.D0": 0,
        "earlystop.D0": -15,
        "needs-nodes": "SKIPPED",
    }
    for name in ("raises", "hangs", "sigkill", "nanloss", "healthy", "needs-nodes"):
        assert name in proc.stdout  # the report names every benchmark
    assert "Traceback" not in proc.stderr
    assert wait_no_marked(mark, timeout=0.5) == []
    assert took < 30  # hangs: 2 s + 1 s grace, not 5 s


def test_gap_between_benchmarks_is_small(tmp_path):
    milabench("run", "--select", "noop", "--repeat", "4", "--run-name", "gap", base=tmp_path)
    run = tmp_path / "runs" / "gap"
    spans = []
    for k in range(1, 5):
        events = data_events(run / f"noop.R{k}.D0.data")
        start = next(e for e in events if e["event"] == "start")["data"]["time"]
        spans.append((start, events[-1]["data"]["time"]))
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:], strict=False)]
    assert all(0 <= g < 0.5 for g in gaps), gaps
