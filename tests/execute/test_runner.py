"""The runner against real processes: faults, timeouts, early stop, data channel."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from milabench.events import RC_INTERRUPTED, RC_TIMEOUT, read_events
from milabench.execute.runner import Ending, Outcome, run_specs, run_specs_sync
from milabench.execute.suite import run_suite
from milabench.plan.spec import ProcessSpec
from milabench.sinks.runfiles import RunFileSink

from .conftest import Collect, cpu_system, make_entry, marked_processes, wait_no_marked


def events_of(run_dir, tag):
    path = run_dir / f"{tag}.data"
    lines = path.read_text().splitlines()
    for line in lines:
        json.loads(line)  # every line strict JSON
    return list(read_events(path))


def kinds(events):
    return [e["event"] for e in events]


@pytest.mark.slow
def test_fault_suite(tmp_path, mark):
    names = ["raises", "hangs", "sigkill", "garbage", "nanloss", "healthy", "earlystop"]
    entries = {n: make_entry(n, tmp_path, mark=mark) for n in names}
    entries["hangs"]["max_duration"] = 2
    entries["healthy"]["argv"] = {"--steps": 5}
    entries["healthy"]["env"]["HF_TOKEN"] = "hf_secret_value"
    run_dir = tmp_path / "runs" / "faults"
    sink = RunFileSink(run_dir)
    t0 = time.monotonic()
    results = asyncio.run(
        run_suite(entries, cpu_system(), run_dir, [sink], grace=1.0, early_stop_grace=0.5)
    )
    sink.close()
    elapsed = time.monotonic() - t0
    by_name = {r.name: r for r in results}
    assert [r.name for r in results] == names

    # raises: exit code 1, traceback on stderr, the rate before the crash kept
    ev = events_of(run_dir, "raises.D0")
    assert kinds(ev)[:3] == ["config", "meta", "start"] and kinds(ev)[-1] == "end"
    assert ev[-1]["data"]["return_code"] == 1
    assert any(e["event"] == "line" and "RuntimeError: boom" in e["data"] for e in ev)
    assert (run_dir / "raises.D0.stderr").read_text().count("RuntimeError: boom") == 1
    assert not by_name["raises"].succeeded

    # hangs: stopped at max_duration, orphaned grandchild (setsid, ignores SIGTERM) killed
    ev = events_of(run_dir, "hangs.D0")
    assert ev[-1]["data"]["return_code"] == RC_TIMEOUT
    assert any(e["event"] == "message" and "timeout" in e["data"]["message"] for e in ev)
    assert any(e["event"] == "line" and e["data"].startswith("grandchild") for e in ev)

    # sigkill: negative signal number
    ev = events_of(run_dir, "sigkill.D0")
    assert ev[-1]["data"]["return_code"] == -9
    assert [
        e["data"]["rate"] for e in ev if e["event"] == "data" and "process_tree" not in e["data"]
    ] == [5.0]

    # garbage: valid records kept, each bad line a format_error with its raw text
    ev = events_of(run_dir, "garbage.D0")
    rates = [
        e["data"]["rate"] for e in ev if e["event"] == "data" and "process_tree" not in e["data"]
    ]
    assert rates[:2] == [1.5, 2.5] and rates[2] == "NaN"
    errors = [e["data"]["line"] for e in ev if e["event"] == "format_error"]
    assert "this is not json" in errors
    assert '{"task": "train", "rate": ' in errors
    assert "[1, 2, 3]" in errors
    assert any("binary" in x for x in errors)
    assert "no newline at the end" in errors
    assert any('"$event": "end"' in x for x in errors)  # a forged end is refused
    assert kinds(ev).count("end") == 1 and ev[-1]["data"]["return_code"] == 0

    # nanloss: NaN written as strict JSON string
    ev = events_of(run_dir, "nanloss.D0")
    losses = [e["data"]["loss"] for e in ev if e["event"] == "data" and "loss" in e["data"]]
    assert losses[-1] == "NaN" and len(losses) == 6

    # healthy: throughput, secrets redacted in config
    ev = events_of(run_dir, "healthy.D0")
    assert ev[0]["data"]["env"]["HF_TOKEN"] == "<redacted>"
    assert "hf_secret_value" not in (run_dir / "healthy.D0.data").read_text()
    rates = [e["data"]["rate"] for e in ev if e["event"] == "data" and "rate" in e["data"]]
    assert len(rates) == 5 and all(r > 0 for r in rates)
    assert ev[-1]["data"]["return_code"] == 0 and by_name["healthy"].succeeded
    meta = ev[1]["data"]
    assert meta["cpu"]["count"] >= 1 and meta["os"]["sysname"] == "Linux"
    assert meta["torch"]["version"].startswith("2.")

    # earlystop: stop event, process terminated by us, counted as success
    ev = events_of(run_dir, "earlystop.D0")
    assert "stop" in kinds(ev)
    assert ev[-1]["data"]["early_stop"] is True
    assert by_name["earlystop"].succeeded
    assert [o.ending for o in by_name["earlystop"].outcomes] == [Ending.EARLY_STOP]
    assert [o.ending for o in by_name["hangs"].outcomes] == [Ending.TIMEOUT]
    assert [o.ending for o in by_name["raises"].outcomes] == [Ending.EXITED]

    # no process started by the suite survives
    assert wait_no_marked(mark, timeout=1.0) == []
    # hangs: 2 s + 1 s grace; earlystop 0.5 s; the rest is process start-up
    assert elapsed < 15


def test_interrupt_stops_every_process(tmp_path, mark):
    entry = make_entry("slowstart", tmp_path, mark=mark, max_duration=60)
    entries = {"slowstart": entry, "healthy": make_entry("healthy", tmp_path, mark=mark)}
    run_dir = tmp_path / "run"

    async def scenario():
        stop = asyncio.Event()
        sink = RunFileSink(run_dir)
        task = asyncio.ensure_future(
            run_suite(entries, cpu_system(), run_dir, [sink], stop_event=stop, grace=5.0)
        )
        await asyncio.sleep(1.0)
        t = time.monotonic()
        stop.set()
        results = await task
        sink.close()
        return results, time.monotonic() - t

    results, took = asyncio.run(scenario())
    assert took < 5
    assert [r.name for r in results] == ["slowstart"]  # the suite stops, healthy never ran
    ev = events_of(run_dir, "slowstart.D0")
    assert ev[-1]["data"]["return_code"] == RC_INTERRUPTED
    assert results[0].status == "interrupted"
    assert [o.ending for o in results[0].outcomes] == [Ending.INTERRUPTED]
    assert any(e["event"] == "data" for e in ev)
    assert marked_processes(mark) == []


def test_smuggled_channel_and_start_failure(tmp_path):
    code = (
        "from benchkit.channel import DataWriter\n"
        "w = DataWriter()\n"
        "print('before', flush=True)\n"
        "w.write({'task': 'train', 'rate': 3.0}); w.flush()\n"
        "print('\\x1b[1mbold\\x1b[0m text', flush=True)\n"
    )
    specs = [
        ProcessSpec(
            tag=["s", "0"],
            argv=[sys.executable, "-c", code],
            data_channel="smuggle",
            entry={"name": "s"},
        ),
        ProcessSpec(tag=["s", "1"], argv=["/nonexistent/python"], entry={"name": "s"}),
    ]
    sink = Collect()
    outcomes = run_specs_sync(specs, [sink])
    assert [o.return_code for o in outcomes] == [0, 127]
    assert [o.ending for o in outcomes] == [Ending.EXITED, Ending.NOT_STARTED]
    s0 = [e for t, e in sink.events if t == "s.0"]
    assert [e["data"] for e in s0 if e["event"] == "data" and "process_tree" not in e["data"]] == [
        {"task": "train", "rate": 3.0}
    ]
    lines = [e["data"] for e in s0 if e["event"] == "line"]
    assert lines == ["before", "\x1b[1mbold\x1b[0m text"]
    s1 = [e for t, e in sink.events if t == "s.1"]
    assert kinds(s1) == ["config", "meta", "start", "error", "end"]


def test_data_channel_ingestion_is_lossless(tmp_path):
    n = 50_000
    code = (
        "import os\n"
        "fd = int(os.environ['DATA_FD'])\n"
        f'lines = \'\'.join(\'{{"task": "train", "rate": %d}}\\n\' % i for i in range({n}))\n'
        "os.write(fd, lines.encode()) if len(lines) < 65536 else None\n"
        "f = os.fdopen(fd, 'w'); f.write(lines); f.close()\n"
    )
    run_dir = tmp_path / "run"
    sink = RunFileSink(run_dir)
    spec = ProcessSpec(tag=["ingest"], argv=[sys.executable, "-c", code], entry={"name": "i"})
    t0 = time.perf_counter()
    (outcome,) = run_specs_sync([spec], [sink])
    took = time.perf_counter() - t0
    sink.close()
    assert outcome.return_code == 0
    ev = events_of(run_dir, "ingest")
    rates = [
        e["data"]["rate"] for e in ev if e["event"] == "data" and "process_tree" not in e["data"]
    ]
    assert rates == list(range(n))
    print(f"ingested {n} lines in {took:.3f} s ({n / took:,.0f} lines/s)")


def test_timeout_kills_sigterm_ignoring_group(tmp_path, mark):
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal,time;"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    spec = ProcessSpec(
        tag=["t"],
        argv=[sys.executable, "-c", code],
        timeout=1.0,
        env={"MILABENCH_TEST_MARK": mark},
        entry={"name": "t"},
    )
    sink = Collect()
    t0 = time.monotonic()
    (outcome,) = asyncio.run(run_specs([spec], [sink], grace=0.5))
    assert outcome.return_code == RC_TIMEOUT and outcome.ending is Ending.TIMEOUT
    assert not outcome.succeeded and not outcome.early_stop
    assert time.monotonic() - t0 < 4
    assert marked_processes(mark) == []


def test_leftover_daemon_after_normal_exit(tmp_path, mark):
    """A benchmark that exits 0 but leaves a setsid daemon holding its stdout."""
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import os, signal, time; os.setsid();"
        'signal.signal(signal.SIGTERM, signal.SIG_IGN); print("daemon", flush=True);'
        " time.sleep(600)'])\n"
        "import time; time.sleep(0.3)\n"
        "print('leader done', flush=True)\n"
    )
    spec = ProcessSpec(
        tag=["d"],
        argv=[sys.executable, "-c", code],
        timeout=60,
        env={"MILABENCH_TEST_MARK": mark},
        entry={"name": "d"},
    )
    sink = Collect()
    t0 = time.monotonic()
    (outcome,) = run_specs_sync([spec], [sink])
    assert outcome.return_code == 0
    assert time.monotonic() - t0 < 10
    lines = [e["data"] for _, e in sink.events if e["event"] == "line"]
    assert "daemon" in lines and "leader done" in lines
    assert marked_processes(mark) == []


def test_outcome_is_one_value_and_makes_the_end_record():
    """The ending decides the return code, the verdict and the ``end`` record; values
    that contradict their ending are refused."""
    exited = Outcome("a", Ending.EXITED, 3)
    assert (exited.return_code, exited.succeeded) == (3, False)
    assert exited.end_record(["x"])["return_code"] == 3
    assert "early_stop" not in exited.end_record(["x"])
    early = Outcome("a", Ending.EARLY_STOP, -9, early_stop=True)
    assert early.succeeded and early.end_record(["x"])["early_stop"] is True
    late = Outcome("a", Ending.INTERRUPTED, early_stop=True)  # stop came while stopping
    assert late.return_code == RC_INTERRUPTED and not late.succeeded
    assert late.end_record(["x"])["early_stop"] is True
    assert Outcome("a", Ending.TIMEOUT).return_code == RC_TIMEOUT
    assert Outcome("a", Ending.NOT_STARTED, 127).return_code == 127
    with pytest.raises(ValueError, match="needs exit code"):
        Outcome("a", Ending.EXITED)
    with pytest.raises(ValueError, match="has no exit code"):
        Outcome("a", Ending.TIMEOUT, 0)
    with pytest.raises(ValueError, match="early_stop=False"):
        Outcome("a", Ending.EARLY_STOP, 0)
    with pytest.raises(ValueError, match="early_stop=True"):
        Outcome("a", Ending.EXITED, 0, early_stop=True)
    with pytest.raises(AttributeError):
        exited.exit_code = 0  # frozen
