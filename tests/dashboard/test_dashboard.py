"""The dashboard sink: a real terminal (tmux) and the plain line output."""

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest
from systemtools import require

from milabench.sinks.dashboard import LiveDashboard, PlainDashboard, _State, make_dashboard

DRIVER = Path(__file__).with_name("drive_dashboard.py")


def ev(event, data=None, pipe=None):
    return {"event": event, "data": data, "pipe": pipe}


def _wait_for(path: Path, content: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text() == content:
            return
        time.sleep(0.05)
    raise AssertionError(f"driver never reached {content!r}")


@pytest.fixture
def tmux(tmp_path):
    socket = f"mb-dash-{tmp_path.name}"
    base = [require("tmux")["tmux"], "-L", socket]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True)


@pytest.mark.quiet  # measures time on this machine
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["long", "short"])
def test_live_dashboard_in_a_real_terminal(tmux, tmp_path, mode):
    marker = tmp_path / "marker"
    command = f"{sys.executable} {DRIVER} --mode {mode} --marker {marker} --pause 30"
    subprocess.run([*tmux, "new-session", "-d", "-x", "150", "-y", "30", command], check=True)
    _wait_for(marker, "paused")
    screen = subprocess.run(
        [*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True
    ).stdout
    assert "milabench  2/5 benchmarks finished" in screen
    assert "failed  badbench.D0" in screen and "RuntimeError: boom" in screen
    # exit code 0 and an early stop, but a NaN loss: failed, as the report will say
    assert "failed  nanbench.D0" in screen and "NaN loss (then stopped early)" in screen
    assert "last 0.000851 Tflops" in screen  # 3 significant digits, never 0.0
    assert "[██████████░░░░░░░░░░]  20/40" in screen  # progress bar at half way
    assert "ETA" in screen and "loss 2.00" in screen
    flops = next(line for line in screen.splitlines() if "flops" in line and "running" in line)
    assert "warm-up" in flops
    if mode == "long":
        assert screen.count("running") >= 5
        assert "812 items/s" in screen and "45,200 Tok/s" in screen
        assert "gpu 93.0% 40.0/80.0GiB 61.0C" in screen
        assert "mem 1.50 GiB" in screen  # peak of the process tree at step 20 of 40
    else:
        assert "resnet50 " in screen and "resnet50.D0" not in screen.split("badbench")[1]
        assert "1,630 items/s" in screen  # the two devices summed
        assert "mem 3.00 GiB" in screen  # the two processes' peaks summed
    # The live block is redrawn in place, not appended: the global line shows once.
    assert screen.count("benchmarks finished") == 1

    marker.write_text("resume")
    _wait_for(marker, "closed")
    screen = subprocess.run(
        [*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True
    ).stdout
    assert "milabench  5/5 benchmarks finished  0 running  2 failed" in screen
    assert screen.count("done    ") == 5 and "dashboard closed" in screen
    assert "peak mem 2.00 GiB" in screen
    assert "12,300 Gflops ±1.5% (target ±2.0%: met)" in screen


def test_plain_output_when_not_a_terminal():
    out = io.StringIO()
    sink = make_dashboard("long", out)
    assert isinstance(sink, PlainDashboard)
    sink.on_event("bench.D0", ev("start", {"command": ["voir", "main.py"], "time": 0}))
    for i in range(1000):
        sink.on_event(
            "bench.D0", ev("data", {"task": "train", "rate": 100.0 + i, "units": "items/s"}, "data")
        )
        sink.on_event("bench.D0", ev("line", "noise", "stdout"))
    sink.on_event("bench.D0", ev("stop", {}))
    sink.on_event("bench.D0", ev("end", {"return_code": 0}))
    sink.on_event("other.D0", ev("message", {"message": "timeout: stopped"}))
    sink.close()
    lines = out.getvalue().splitlines()
    assert lines == [
        "[bench.D0] start voir main.py",
        "[bench.D0] train rate 100 items/s",  # throttled: not 1000 lines
        "[bench.D0] early stop: observation budget reached",
        "[bench.D0] end: done (return code 0)",
        "[other.D0] message: timeout: stopped",
    ]


def _nan_then_stop(sink, tag="nan.D0", loss="NaN"):
    sink.on_event(tag, ev("config", {"name": "nan", "measure": {"required_observations": 1}}))
    sink.on_event(tag, ev("start", {"command": ["python", "main.py"], "time": 0}))
    rate = {"task": "train", "rate": 0.000851, "units": "Tflops", "time": 0}
    sink.on_event(tag, ev("data", rate, "data"))
    sink.on_event(tag, ev("data", {"task": "train", "loss": loss, "time": 0}, "data"))
    sink.on_event(tag, ev("stop", {"reason": "window"}))
    sink.on_event(tag, ev("end", {"return_code": -15, "early_stop": True}))


def _warmup_then_window(sink, tag="w.D0", met=True):
    sink.on_event(tag, ev("config", {"name": "w"}))
    sink.on_event(tag, ev("start", {"command": ["python", "w.py"], "time": 0}))
    yield "started"
    warm = {"seconds": 1.234, "observations": 12345, "settled": True}
    sink.on_event(tag, ev("data", {"task": "train", "warmup": warm}, "data"))
    yield "warmed up"
    rate = {"task": "train", "rate": 12345.0, "units": "items/s", "time": 0}
    sink.on_event(tag, ev("data", rate, "data"))
    yield "measuring"
    window = {"observations": 60, "measured_s": 6.0, "mean": 12345.0, "halfwidth": 0.015}
    window.update({"target": 0.02, "met": met, "reason": "precision" if met else "max_time"})
    sink.on_event(tag, ev("data", {"task": "train", "window": window}, "data"))
    tree = {"rss": 10 * 2**20, "peak_rss": 1.5 * 2**30, "processes": 3, "peak_processes": 3}
    sink.on_event(tag, ev("data", {"task": "main", "time": 0, "process_tree": tree}, "data"))
    yield "window"
    sink.on_event(tag, ev("stop", {"reason": "window"}))
    sink.on_event(tag, ev("end", {"return_code": 0, "early_stop": True}))
    yield "ended"


def test_plain_status_formatting_and_window():
    out = io.StringIO()
    sink = PlainDashboard(out)
    _nan_then_stop(sink)
    _nan_then_stop(sink, "inf.D0", loss="Infinity")
    for _ in _warmup_then_window(sink):
        pass
    for _ in _warmup_then_window(sink, "miss.D0", met=False):
        pass
    text = out.getvalue()
    assert "[nan.D0] train rate 0.000851 Tflops" in text  # not 0.0
    assert "[nan.D0] early stop: measurement window over" in text
    assert "[nan.D0] end: failed (NaN loss (then stopped early)) (return code -15)" in text
    assert "[inf.D0] end: failed (NaN loss (then stopped early))" in text
    assert "[w.D0] warm-up over after 1.23 s (12,345 steps, settled)" in text
    assert "[w.D0] train rate 12,300 items/s" in text
    assert (
        "[w.D0] window: 12,300 items/s ±1.5% (target ±2.0%: met) over 6.00 s, 60 observations"
        in text
    )
    assert "[miss.D0] window: 12,300 items/s ±1.5% (target ±2.0%: not met, max_time)" in text
    assert "[w.D0] end: done (return code 0), peak memory 1.50 GiB" in text


def test_status_is_the_report_rule():
    """Every way to end, read by the dashboard and by `outcome.status` on the same facts."""
    from milabench.report import outcome

    state = _State()
    cases = {
        "ok.D0": ([ev("data", {"task": "train", "rate": 1.0})], {"return_code": 0}, "done"),
        "norate.D0": ([], {"return_code": 0}, "failed"),
        "other.D0": ([ev("data", {"task": "val", "rate": 1.0})], {"return_code": 0}, "failed"),
        "err.D0": (
            [ev("data", {"task": "train", "rate": 1.0}), ev("error", {"message": "x"})],
            {"return_code": 0},
            "failed",
        ),
        "crash.D0": ([ev("data", {"task": "train", "rate": 1.0})], {"return_code": 1}, "failed"),
        "stopped.D0": (
            [ev("data", {"task": "train", "rate": 1.0}), ev("stop", {})],
            {"return_code": -15},
            "done",
        ),
        "slow.D0": (
            [ev("data", {"task": "train", "rate": 1.0})],
            {"return_code": "TIMEOUT"},
            outcome.TIMED_OUT,
        ),
        "skip.D0": (
            [ev("message", {"message": "skipped: no GPU", "skipped": "capability"})],
            {"return_code": "SKIPPED"},
            "skipped",
        ),
        "budget.D0": (
            [
                ev("data", {"task": "train", "rate": 1.0}),
                ev("data", {"task": "early_stop", "progress": [5, 5]}),
            ],
            {"return_code": -15},
            "done",
        ),
    }
    for tag, (events, end, _) in cases.items():
        state.update(tag, ev("start", {"command": ["x"], "time": 0}))
        for event in events:
            state.update(tag, event)
        state.update(tag, ev("end", end))
    got = {row.tag: row.status for row in state.finished}
    assert got == {tag: expected for tag, (_, _, expected) in cases.items()}
    failed = {row.tag: row.detail for row in state.finished if row.status != "done"}
    assert failed["norate.D0"] == "no throughput sample"
    assert failed["crash.D0"] == "exit code 1"
    assert failed["err.D0"] == "error event"


def test_multinode_rank_without_rates_is_not_failed():
    state = _State()
    for tag in ("ddp.0.node1", "ddp.0.node2"):
        state.update(tag, ev("config", {"name": "ddp"}))
        state.update(tag, ev("start", {"command": ["torchrun"], "time": 0}))
    state.update("ddp.0.node1", ev("data", {"task": "train", "rate": 10.0}))
    state.update("ddp.0.node2", ev("end", {"return_code": 0}))
    state.update("ddp.0.node1", ev("end", {"return_code": 0}))
    assert [r.status for r in state.finished] == ["done", "done"]


class FakeTTY(io.StringIO):
    """A text stream that says it is a terminal, to count the dashboard's writes."""

    def __init__(self):
        super().__init__()
        self.writes = 0

    def isatty(self):
        return True

    def write(self, text):
        self.writes += 1
        return super().write(text)


def test_dash_no_is_plain_even_on_a_terminal():
    assert isinstance(make_dashboard("no", FakeTTY()), PlainDashboard)


@pytest.mark.quiet  # measures time on this machine
def test_redraws_are_throttled_and_events_are_cheap():
    stream = FakeTTY()
    sink = make_dashboard("long", stream)
    assert isinstance(sink, LiveDashboard)
    n = 0
    start = time.perf_counter()
    sink.on_event("b.D0", ev("start", {"command": ["x"], "time": 0}))
    while time.perf_counter() - start < 1.0:
        sink.on_event(
            "b.D0", ev("data", {"task": "train", "rate": 5.0, "units": "items/s"}, "data")
        )
        sink.on_event("b.D0", ev("line", "x", "stdout"))
        n += 2
    elapsed = time.perf_counter() - start
    sink.close()
    assert n > 10_000  # tens of thousands of events per second at least
    assert elapsed / n < 100e-6  # generous bound; typical is about 1 us
    assert stream.writes <= 8  # ~4 redraws per second, not one per event
    assert "5.00 items/s" in stream.getvalue()


def test_live_rows_warmup_window_and_status(monkeypatch):
    """The blessed rendering of the same facts (rows and finished lines, drawn for real)."""
    monkeypatch.setenv("COLUMNS", "200")
    stream = FakeTTY()
    sink = make_dashboard("long", stream)
    assert isinstance(sink, LiveDashboard)
    steps = _warmup_then_window(sink)
    seen = {}
    for step in steps:
        rows = list(sink.state.rows.values())
        if rows:
            seen[step] = sink._row_line(rows[0], 8)
    assert "warm-up" in seen["started"]
    assert "warm-up" not in seen["warmed up"]
    assert "12,300 items/s" in seen["measuring"] and "±" not in seen["measuring"]
    assert "12,300 items/s ±1.5% (target ±2.0%: met)" in seen["window"]
    assert "mem 1.50 GiB" in seen["window"]
    _nan_then_stop(sink)
    sink.close()
    screen = stream.getvalue()
    assert "done   " in screen and "12,300 items/s ±1.5% (target ±2.0%: met)" in screen
    assert "peak mem 1.50 GiB" in screen
    nan_line = next(line for line in screen.splitlines() if "nan.D0" in line)
    assert "failed" in nan_line and "done" not in nan_line
    assert "last 0.000851 Tflops" in nan_line and "NaN loss (then stopped early)" in nan_line
    assert "loss NaN" in nan_line  # said as it is, not as a missing value
