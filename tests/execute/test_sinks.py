"""Run-file sink and the resume bookkeeping, without processes."""

from __future__ import annotations

import json

from milabench.events import read_events
from milabench.execute.suite import record_error, record_skip, set_aside, succeeded_in
from milabench.sinks.runfiles import RunFileSink


def test_runfiles_many_tags_redacted_and_flushed(tmp_path):
    sink = RunFileSink(tmp_path)
    sink.on_event("a.D0", {"event": "config", "data": {"env": {"API_KEY": "k"}}, "pipe": None})
    sink.on_event(
        "a.D1", {"event": "start", "data": {"command": ["x", "--token=abc"]}, "pipe": None}
    )
    sink.on_events(
        "a.D0",
        [
            {"event": "line", "data": "out 1", "pipe": "stdout"},
            {"event": "line", "data": "err 1", "pipe": "stderr"},
            {"event": "data", "data": {"rate": 1.0}, "pipe": "data", "_json": '{"rate": 1.0}'},
            {"event": "data", "data": {"loss": float("nan")}, "pipe": "data"},
        ],
    )
    # flushed as they arrive: readable before close
    assert (tmp_path / "a.D0.stdout").read_text() == "out 1\n"
    assert (tmp_path / "a.D0.stderr").read_text() == "err 1\n"
    lines = (tmp_path / "a.D0.data").read_text().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["config", "line", "line", "data", "data"]
    assert json.loads(lines[0])["data"]["env"]["API_KEY"] == "<redacted>"
    assert json.loads(lines[3]) == {"event": "data", "data": {"rate": 1.0}, "pipe": "data"}
    assert json.loads(lines[4])["data"]["loss"] == "NaN"
    assert "abc" not in (tmp_path / "a.D1.data").read_text()
    sink.on_event("a.D0", {"event": "end", "data": {"return_code": 0}, "pipe": None})
    assert "a.D0" not in sink._files  # closed at its end
    sink.close()


def test_succeeded_in_and_set_aside(tmp_path):
    sink = RunFileSink(tmp_path)

    def run(tag, name, code, stop=False, rate=True):
        sink.on_event(tag, {"event": "config", "data": {"name": name}, "pipe": None})
        if rate:
            record = {"task": "train", "rate": 12.5, "units": "items/s"}
            sink.on_event(tag, {"event": "data", "data": record, "pipe": "data"})
        if stop:
            sink.on_event(tag, {"event": "stop", "data": None, "pipe": "data"})
        sink.on_event(tag, {"event": "end", "data": {"return_code": code}, "pipe": None})

    run("ok.D0", "ok", 0)
    run("ok.D1", "ok", 0)
    run("half.D0", "half", 0)
    run("half.D1", "half", 1)
    run("early.D0", "early", -15, stop=True)
    run("rep.R1.D0", "rep", 0)
    run("rep.R2.D0", "rep", "TIMEOUT")
    run("cut.D0", "cut", 0)
    run("nothing.D0", "nothing", 0, rate=False)  # exited cleanly, measured nothing
    (tmp_path / "cut.D1.data").write_text('{"event": "config", "data": {"name": "cut"}}\n')
    record_skip([sink], "skip", {"name": "skip"}, "skipped: no gpu")
    record_error([sink], "err", {"name": "err"}, RuntimeError("env missing"))
    sink.close()
    # the report's success rule: "nothing" measured nothing, so --resume runs it again
    assert succeeded_in(tmp_path) == {"ok", "early", "rep.R1"}
    events = list(read_events(tmp_path / "skip.data"))
    assert events[1]["data"] == {"message": "skipped: no gpu", "skipped": "capability"}
    assert events[2]["data"]["return_code"] == "SKIPPED"
    set_aside(tmp_path, "half")
    assert not list(tmp_path.glob("half.*"))
    assert len(list((tmp_path / "previous-attempts").glob("*/half.D*.data"))) == 2
