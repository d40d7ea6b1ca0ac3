"""Hang regressions: every wait of the runner is bounded, and a signal always ends a run.

Each test drives real processes into a situation that used to (or could) block the
runner forever: a lost exit report, an escaped process holding the pipes, a torchrun
whose workers outlive an early stop, SIGTERM during an early stop, and a stuck event
loop that only the session's watchdog can end.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from milabench.execute import launcher as launcher_mod
from milabench.execute import runner as runner_mod
from milabench.execute.launcher import _ExitProtocol
from milabench.execute.runner import run_specs_sync
from milabench.execute.suite import run_suite
from milabench.plan.spec import ProcessSpec
from milabench.sinks.runfiles import RunFileSink

from .conftest import Collect, cpu_system, make_entry, marked_processes, wait_no_marked


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def events_of(path):
    out = []
    for line in path.read_text().splitlines():
        out.append(json.loads(line))
    return out


def test_lost_exit_report_does_not_hang(monkeypatch, mark):
    """The 02:45 race, made permanent: the child watcher's exit report never arrives.

    Without a ``max_duration`` the runner used to wait forever; the handle now notices
    the leader is gone and reports the exit itself (with the transport's status).
    """

    def swallow(self):  # the report is dropped (the pre-02:45 code lost it in a race)
        asyncio.subprocess.SubprocessStreamProtocol.process_exited(self)

    monkeypatch.setattr(_ExitProtocol, "process_exited", swallow)
    monkeypatch.setattr(launcher_mod, "EXIT_PATIENCE", 1.0)
    spec = ProcessSpec(
        tag=["lost"],
        argv=[sys.executable, "-c", "print('bye', flush=True); raise SystemExit(3)"],
        env={"MILABENCH_TEST_MARK": mark},
        entry={"name": "lost"},
    )
    sink = Collect()
    t0 = time.monotonic()
    (outcome,) = run_specs_sync([spec], [sink])
    assert time.monotonic() - t0 < 6
    assert outcome.return_code == 3
    kinds = [e["event"] for _, e in sink.events]
    assert kinds[-1] == "end"
    assert "bye" in [e["data"] for _, e in sink.events if e["event"] == "line"]


def test_escaped_process_holding_every_pipe(tmp_path, monkeypatch):
    """A double-forked, setsid, token-less, SIGTERM-ignoring process keeps stdout, stderr
    and the data pipe open after the benchmark exits. Nothing can kill it (it escaped
    every net), so the runner must give up on its pipes after the drain timeout, close
    them (no descriptor leaks), and finish."""
    monkeypatch.setattr(runner_mod, "DRAIN_TIMEOUT", 1.0)
    pidfile = tmp_path / "escapee.pid"
    code = textwrap.dedent(
        """
        import os, sys, time
        fd = int(os.environ["DATA_FD"])
        os.write(fd, b'{"task": "train", "rate": 1.0}\\n')
        if os.fork() == 0:
            if os.fork() == 0:  # grandchild: orphaned at once, no snapshot can see it
                os.setsid()
                os.set_inheritable(fd, True)
                os.execve(sys.executable, [sys.executable, "-c",
                    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                    "time.sleep(60)"], {"PATH": os.environ.get("PATH", "")})
            os._exit(0)
        os.wait()
        time.sleep(0.5)  # let the grandchild shed the token (exec with a clean env)
        print("leader done", flush=True)
        """
    )
    spec = ProcessSpec(
        tag=["esc"], argv=[sys.executable, "-c", code], data_channel="fd", entry={"name": "e"}
    )
    run_specs_sync([ProcessSpec(tag=["w"], argv=["true"], entry={"name": "w"})], [Collect()])
    before_fds = open_fds()  # after a first run: imports and caches settled
    before = {p.pid for p in psutil.process_iter()}
    sink = Collect()
    t0 = time.monotonic()
    try:
        (outcome,) = run_specs_sync([spec], [sink])
        took = time.monotonic() - t0
    finally:
        for p in psutil.process_iter(["pid", "cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if p.info["pid"] not in before and "signal.SIG_IGN);time.sleep(60)" in cmd:
                pidfile.write_text(str(p.pid))
                p.kill()
    assert pidfile.exists(), "the escapee was never started"
    assert outcome.return_code == 0
    assert took < 8
    messages = [e["data"]["message"] for _, e in sink.events if e["event"] == "message"]
    assert any("output still open" in m for m in messages)
    assert [
        e["data"]["rate"]
        for _, e in sink.events
        if e["event"] == "data" and "process_tree" not in e["data"]
    ] == [1.0]
    assert [e["event"] for _, e in sink.events][-1] == "end"
    assert open_fds() <= before_fds  # the pipes' read ends were closed, not leaked


TORCHRUN_WORKER = """
import os, signal, time
import torch.distributed as dist
from benchkit.channel import DataWriter

dist.init_process_group("gloo")
rank = dist.get_rank()
writer = DataWriter()
if rank == 0:
    writer.write({"task": "train", "rate": 10.0, "units": "items/s"})
    writer.event("stop")
    writer.flush()
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a worker slow to leave
print(f"rank {rank} keeps running", flush=True)
while True:
    time.sleep(0.2)
"""


@pytest.mark.slow
def test_early_stopped_torchrun_is_ended(tmp_path, mark):
    """torchrun (its workers in sessions of their own) outliving an early stop, one
    worker ignoring SIGTERM: the `end` event is written and nothing survives."""
    bench = tmp_path / "bench" / "esddp"
    bench.mkdir(parents=True)
    (bench / "main.py").write_text(TORCHRUN_WORKER)
    entry = make_entry("esddp", tmp_path, definition=bench, mark=mark, plan={"method": "torchrun"})
    entry["max_duration"] = 60
    run_dir = tmp_path / "runs" / "es"
    sink = RunFileSink(run_dir)
    t0 = time.monotonic()
    try:
        results = asyncio.run(
            run_suite(
                {"esddp": entry}, cpu_system(), run_dir, [sink], grace=1.0, early_stop_grace=0.5
            )
        )
    finally:
        sink.close()
    took = time.monotonic() - t0
    assert wait_no_marked(mark, timeout=1.0) == []
    (result,) = results
    assert result.outcomes and all(o.early_stop for o in result.outcomes)
    ev = events_of(run_dir / "esddp.data")
    assert ev[-1]["event"] == "end" and ev[-1]["data"]["early_stop"] is True
    assert any(e["event"] == "stop" for e in ev)
    assert took < 40  # torchrun's start-up dominates; the stop itself takes ~2 s


DRIVER = """
import json, sys, time, types
from pathlib import Path
from milabench.execute import runner, session

cfg = json.loads(Path(sys.argv[1]).read_text())
session.CANCEL_AFTER = cfg["cancel_after"]
session.HARD_EXIT_AFTER = cfg["hard_exit_after"]
if cfg.get("stuck_on_stop"):
    # Fault injection: the orchestrator blocks its event loop for good once the
    # benchmark asks to stop (a stuck sink, a wedged lock): only the watchdog can help.
    feed = runner._Channel.feed
    def stuck_feed(self, lines):
        feed(self, lines)
        if self.stopped.is_set():
            print("loop stuck", flush=True)
            time.sleep(3600)
    runner._Channel.feed = stuck_feed
suite = types.SimpleNamespace(entries=cfg["entries"], system=cfg["system"])
sys.exit(session.run_session(suite, Path(cfg["run_dir"])))
"""

STUBBORN = """
import signal, time
from benchkit.channel import DataWriter
signal.signal(signal.SIGTERM, signal.SIG_IGN)
writer = DataWriter()
writer.write({"task": "train", "rate": 5.0, "units": "items/s"})
writer.event("stop")
writer.flush()
print("ignoring SIGTERM", flush=True)
while True:
    time.sleep(0.1)
"""


def _start_driver(tmp_path, mark, **cfg):
    bench = tmp_path / "bench" / "stubborn"
    bench.mkdir(parents=True)
    (bench / "main.py").write_text(STUBBORN)
    entry = make_entry("stubborn", tmp_path, definition=bench, mark=mark)
    entry["max_duration"] = 60
    system = cpu_system(options={"run": {"grace": 5, "early_stop_grace": 0.3}})
    run_dir = tmp_path / "runs" / "sig"
    config = {"entries": {"stubborn": entry}, "system": system, "run_dir": str(run_dir), **cfg}
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    (tmp_path / "driver.py").write_text(DRIVER)
    env = dict(os.environ, MILABENCH_DASH="no")
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "cfg.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    return proc, run_dir / "stubborn.D0.data"


def _wait_for(path, needle, proc, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"never saw {needle!r} in {path.name}:\n{out}\n{err}")


def _sigterm(proc: subprocess.Popen) -> tuple[str, str, float]:
    """SIGTERM the driver; its output and how long it took to exit."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    return out, err, time.monotonic() - t0


def test_sigterm_during_early_stop_grace(tmp_path, mark):
    """SIGTERM while the runner gives a SIGTERM-ignoring benchmark its 5 s of grace after
    an early stop: the run ends within the short interrupt grace, with exit code 143."""
    proc, data = _start_driver(tmp_path, mark, cancel_after=8.0, hard_exit_after=15.0)
    try:
        _wait_for(data, "early stop: terminating", proc)
        out, err, took = _sigterm(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert took < 4.5, took  # interrupt grace 2.5 s, not the 5 s early-stop grace
    assert wait_no_marked(mark, timeout=0.5) == []
    ev = events_of(data)
    assert ev[-1]["event"] == "end" and ev[-1]["data"]["early_stop"] is True
    assert "Traceback" not in err


def test_watchdog_ends_a_stuck_run(tmp_path, mark):
    """The event loop itself is stuck: SIGTERM still ends the run (the watchdog thread
    kills the benchmark's processes and exits) within the hard deadline."""
    proc, data = _start_driver(
        tmp_path, mark, cancel_after=0.5, hard_exit_after=1.5, stuck_on_stop=True
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not marked_processes(mark):
            time.sleep(0.05)
        _wait_for(data, '"stop"', proc)
        time.sleep(0.3)  # the loop is now blocked in the injected fault
        out, err, took = _sigterm(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert took < 4, took
    assert "did not stop in time" in err
    assert wait_no_marked(mark, timeout=1.0) == []


def test_early_stop_reaches_every_node_of_a_job(mark):
    """A multi-node job: only the main rank reports ``stop``; the worker node's process
    (blocked, as in a collective whose peer is gone, and ignoring SIGTERM) used to wait
    for its ``max_duration``. It is now early-stopped with the job."""
    from milabench.execute.launcher import LocalLauncher

    main = (
        "import time\n"
        "from benchkit.channel import DataWriter\n"
        "w = DataWriter(); w.write({'task': 'train', 'rate': 2.0}); w.event('stop'); w.flush()\n"
        "time.sleep(60)\n"
    )
    worker = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('worker blocked', flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {"MILABENCH_TEST_MARK": mark}
    entry = {"name": "job", "num_machines": 2}
    specs = [
        ProcessSpec(
            tag=["job", "node0"],
            argv=[sys.executable, "-c", main],
            env=env,
            node={"name": "node0", "ip": "10.0.0.1"},
            timeout=60,
            entry=entry,
        ),
        ProcessSpec(
            tag=["job", "node1"],
            argv=[sys.executable, "-c", worker],
            env=env,
            node={"name": "node1", "ip": "10.0.0.2"},
            timeout=60,
            entry=entry,
        ),
    ]
    sink = Collect()
    t0 = time.monotonic()
    # Both run here (a local launcher given explicitly): what matters is the job logic.
    outcomes = run_specs_sync(
        specs, [sink], launcher=LocalLauncher(), grace=0.5, early_stop_grace=0.3
    )
    took = time.monotonic() - t0
    assert [o.early_stop for o in outcomes] == [True, True]
    assert all(o.succeeded for o in outcomes)
    assert took < 8, took
    assert wait_no_marked(mark, timeout=1.0) == []
    ends = {t: e["data"] for t, e in sink.events if e["event"] == "end"}
    assert ends["job.node1"]["early_stop"] is True


SYNC_DRIVER = """
import sys
from milabench.execute.runner import run_specs_sync
from milabench.plan.spec import ProcessSpec
code = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    "print('started', flush=True); time.sleep(60)"
)
spec = ProcessSpec(tag=["step"], argv=[sys.executable, "-c", code],
                   env={"MILABENCH_TEST_MARK": sys.argv[1]}, entry={"name": "step"})
class Echo:
    def on_event(self, tag, event):
        if event["event"] in ("line", "end"):
            print(event["event"], event["data"], flush=True)
    def close(self):
        pass
run_specs_sync([spec], [Echo()])
"""


def test_sigterm_ends_a_sync_step_and_its_processes(tmp_path, mark):
    """`run_specs_sync` (install, prepare): SIGTERM used to kill only milabench and leave
    the step's processes (in sessions of their own) running; now they are stopped and
    the command exits 143 within the interrupt grace."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SYNC_DRIVER, mark],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "line started"
        out, err, took = _sigterm(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert "Unknown child process" not in err  # nothing reaped behind asyncio's back
    assert "Traceback" not in err
    assert "'return_code': 'INTERRUPTED'" in out
    assert took < 4.5, took
    assert wait_no_marked(mark, timeout=0.5) == []
