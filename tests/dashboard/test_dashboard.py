"""The dashboard sink: a real terminal (tmux) and the plain line output."""

import io
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from milabench.sinks.dashboard import LiveDashboard, PlainDashboard, make_dashboard

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
    if shutil.which("tmux") is None:
        from debian import ensure_packages

        reason = ensure_packages("tmux")
        if shutil.which("tmux") is None:
            pytest.skip(f"tmux is not installed: {reason}")
    socket = f"mb-dash-{tmp_path.name}"
    base = ["tmux", "-L", socket]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["long", "short"])
def test_live_dashboard_in_a_real_terminal(tmux, tmp_path, mode):
    marker = tmp_path / "marker"
    command = f"{sys.executable} {DRIVER} --mode {mode} --marker {marker} --pause 3"
    subprocess.run([*tmux, "new-session", "-d", "-x", "150", "-y", "30", command], check=True)
    _wait_for(marker, "paused")
    screen = subprocess.run(
        [*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True
    ).stdout
    assert "milabench  1/3 benchmarks finished" in screen
    assert "failed  badbench.D0" in screen and "RuntimeError: boom" in screen
    assert "[██████████░░░░░░░░░░]  20/40" in screen  # progress bar at half way
    assert "ETA" in screen and "loss 2.0000" in screen
    if mode == "long":
        assert screen.count("running") >= 4
        assert "812.5 items/s" in screen and "45,212 Tok/s" in screen
        assert "gpu 93% 40.0/80.0GiB 61C" in screen
    else:
        assert "resnet50 " in screen and "resnet50.D0" not in screen.split("badbench")[1]
        assert "1,626 items/s" in screen  # the two devices summed
    # The live block is redrawn in place, not appended: the global line shows once.
    assert screen.count("benchmarks finished") == 1

    _wait_for(marker, "closed")
    screen = subprocess.run(
        [*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True
    ).stdout
    assert "milabench  3/3 benchmarks finished  0 running  1 failed" in screen
    assert screen.count("done    ") == 4 and "dashboard closed" in screen


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
        "[bench.D0] train rate 100.0 items/s",  # throttled: not 1000 lines
        "[bench.D0] early stop: observation budget reached",
        "[bench.D0] end (return code 0)",
        "[other.D0] message: timeout: stopped",
    ]


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
    assert "5.0 items/s" in stream.getvalue()
