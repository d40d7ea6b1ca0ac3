"""The target-unreachable rule on rate streams recorded from real hosts (every window
measured to its 30 s `max`, tests/doctor/recorded/README.md), replayed through the same
window by scripts/window_replay.py: it must never stop a window that would have met its
target, and on a noisy host it must save time."""

from __future__ import annotations

from pathlib import Path

import pytest
from scriptmodule import load_script, unload

ROOT = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).parent / "recorded"


@pytest.fixture(scope="module")
def replay():
    yield load_script("window_replay")
    unload("window_replay")


RECORDINGS = sorted(RECORDED.glob("streams-*.json.gz"))


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.name for p in RECORDINGS])
def test_never_stops_a_window_that_would_have_met_its_target(replay, path):
    from benchkit.window import WindowSettings

    streams = replay.load_streams(path)
    assert len(streams) >= 10
    for target in (0.01, 0.02, 0.03, 0.05):
        off = WindowSettings(min=6, max=30, precision=target, stop_unreachable=False)
        on = WindowSettings(min=6, max=30, precision=target)
        for stream in streams:
            a, b = replay.replay(stream, off), replay.replay(stream, on)
            if a.reason == "precision":
                assert b.reason == "precision" and b.at == a.at, (stream.tag, target)
            if b.reason == "unreachable":
                assert a.reason == "max_time" and b.at < a.at, (stream.tag, target)


def test_on_a_shared_host_it_saves_time(replay):
    from benchkit.window import WindowSettings

    streams = replay.load_streams(RECORDED / "streams-busy.json.gz")
    off = WindowSettings(min=6, max=30, precision=0.02, stop_unreachable=False)
    on = WindowSettings(min=6, max=30, precision=0.02)
    spent_off = sum(replay.replay(s, off).at for s in streams)
    spent_on = sum(replay.replay(s, on).at for s in streams)
    assert spent_on < 0.75 * spent_off


def test_the_command_line_says_what_it_saves(replay, capsys):
    assert replay.main([str(RECORDED / "streams-busy.json.gz"), "--targets", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "| ±2% | 15 | " in out and "| 0 |" in out
