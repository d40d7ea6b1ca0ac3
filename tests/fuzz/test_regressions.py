"""Plain regression tests for the bugs the fuzz tests found (one per bug)."""

from __future__ import annotations

import pytest
from clirun import milabench

from benchkit.channel import SmuggleDecoder, smuggle_encode
from milabench.config.loader import load_suite
from milabench.errors import ConfigError
from milabench.events import decode
from milabench.execute.runner import _Channel

SYSTEM = {"arch": "cpu", "nodes": [{"name": "local", "ip": "127.0.0.1", "main": True}]}


@pytest.mark.parametrize("text", ["!!float", "!!int", "a: !!float\n"])
def test_empty_typed_scalar_is_a_config_error(tmp_path, text):
    # Was: IndexError from PyYAML's constructor.
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="suite.yaml: invalid YAML"):
        load_suite(path, system=SYSTEM, base=tmp_path)


@pytest.mark.parametrize("depth", [150, 2000])
def test_deeply_nested_suite_is_a_config_error(tmp_path, depth):
    # Was: RecursionError in yamlio.normalize. Our contract is a one-line ConfigError
    # naming the file and exit 2; at depth 2000 the words may be the YAML library's own
    # (libyaml stops at its own limit), so only our rule's words are checked, at 150.
    path = tmp_path / "suite.yaml"
    path.write_text("a: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(ConfigError) as info:
        load_suite(path, system=SYSTEM, base=tmp_path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    if depth < 1000:
        assert "nested more than 100 levels deep" in message
    proc = milabench("run", "--config", str(path), "--base", str(tmp_path / "base"))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(path) in line and "Traceback" not in proc.stderr


class _Collect:
    def __init__(self):
        self.events = []

    def many(self, records):
        self.events.extend(records)


def test_deeply_nested_data_line_is_a_format_error():
    # Was: RecursionError out of _Channel.feed (both the batch and the per-line parse).
    sink = _Collect()
    _Channel(sink).feed(["[" * 100_000, '{"rate": 1}'])
    assert [ev["event"] for ev in sink.events] == ["format_error", "data"]
    assert sink.events[1]["data"] == {"rate": 1}


def test_deeply_nested_data_file_line_is_skipped():
    # Was: RecursionError out of events.decode (and so read_events / report).
    assert decode("[" * 100_000) is None


def test_smuggled_record_cut_between_esc_and_bracket():
    # Was: the record was lost, "\x1b" and "[...z" came out as plain text.
    stream = "0" + smuggle_encode("{}") + "0"
    decoder = SmuggleDecoder()
    plain1, recs1 = decoder.feed(stream[:2])
    plain2, recs2 = decoder.feed(stream[2:])
    assert recs1 + recs2 == ["{}"]
    assert plain1 + plain2 + decoder.flush() == "00"
    # A lone trailing ESC at the end of the stream still comes out as text.
    decoder = SmuggleDecoder()
    assert decoder.feed("x\x1b") == ("x", [])
    assert decoder.flush() == "\x1b"
