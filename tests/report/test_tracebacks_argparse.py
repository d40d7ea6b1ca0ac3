"""The cause line of a failure: argparse's own message instead of ``exit code 2`` or a
bare ``SystemExit: 2`` (what voir logs when the script calls ``parser.error``)."""

from __future__ import annotations

from milabench.report.tracebacks import (
    explain,
    extract_argparse_error,
    extract_error_line,
)

USAGE = [
    "loading data...",
    "usage: train.py [-h] [--epochs EPOCHS]",
    "                [--lr LR]",
    "train.py: error: argument --epochs: invalid int value: 'x'",
]
LINE = "train.py: error: argument --epochs: invalid int value: 'x'"
BARE = {"type": "SystemExit", "message": "2"}


def test_argparse_line_and_usage_excerpt():
    found = extract_argparse_error(USAGE)
    assert found.line == LINE
    assert found.excerpt == USAGE[1:]
    # subcommands put a space in the program name; rank prefixes are removed
    sub = ["[rank0]: main.py train: error: the following arguments are required: --data"]
    assert extract_argparse_error(sub).line.startswith("main.py train: error: the following")
    # not argparse: indented, no program, no message
    for line in ["  x: error: y", "error: y", "x: error:", "x: warning: y"]:
        assert extract_argparse_error([line]) is None, line


def test_plain_exit_code_2_shows_the_argparse_line():
    cause = explain(USAGE, [], [], "exit code 2")
    assert cause.line == LINE and cause.excerpt[0].startswith("usage: train.py")


def test_voir_bare_systemexit_event_gives_way_to_the_argparse_line():
    assert explain(USAGE, [], [BARE], "error event").line == LINE
    # not argparse-shaped, but a line saying error: beats a bare exit status
    stderr = ["starting", "fatal error: config file missing", ""]
    assert explain(stderr, [], [BARE], "error event").line == "fatal error: config file missing"
    assert extract_error_line(["RuntimeError: x"]) is None  # exception names are not "error:"
    # nothing better: the event itself
    assert explain(["starting"], [], [BARE], "error event").line == "SystemExit: 2"


def test_a_traceback_or_a_meaningful_event_still_wins():
    trace = [
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "ValueError: bad batch",
    ]
    assert explain(USAGE + trace, [], [BARE], "exit code 1").line == "ValueError: bad batch"
    # a printed `SystemExit: 2` traceback is no cause either
    exit_trace = [*trace[:2], "SystemExit: 2"]
    assert explain(USAGE + exit_trace, [], [], "exit code 2").line == LINE
    assert explain(exit_trace, [], [], "exit code 2").line == "SystemExit: 2"
    event = {"type": "ProbeNeverFired", "message": "probe `//f > x` never fired"}
    assert explain(USAGE, [], [event], "error event").line.startswith("ProbeNeverFired: probe")
    assert explain([], [], [], "exit code 2").line == "exit code 2"
