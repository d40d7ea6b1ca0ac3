"""Fuzz of the data channel: the runner's line parser (`_Channel.feed`), the decoder of
records smuggled in standard output (`SmuggleDecoder`), and the `.data` file reader.

Whatever a benchmark writes, nothing raises: a bad line becomes one ``format_error`` event
(or stays plain text in standard output), a good record comes out as it went in.
Run longer with ``HYPOTHESIS_PROFILE=long python -m pytest tests/fuzz`` (see conftest).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from fuzz_util import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from benchkit.channel import ESC, SmuggleDecoder, smuggle_encode
from milabench.events import decode, encode, read_events
from milabench.execute.runner import RESERVED_EVENTS, _Channel
from milabench.report.runs import read_file


class _Collect:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def many(self, records: list[dict]) -> None:
        self.events.extend(records)


def feed(lines: list[str]) -> list[dict]:
    sink = _Collect()
    _Channel(sink).feed(lines)
    return sink.events


# --- generators -----------------------------------------------------------------------
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=15,
)
# A metric record's keys never start with "$": {"$event": ..., "$data": ...} is the
# envelope of a non-metric event (benchkit.channel.DataWriter.event), fuzzed separately.
records = st.dictionaries(
    st.text(max_size=6).filter(lambda k: not k.startswith("$")), json_values, max_size=5
)

nasty_fragments = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        '"',
        ":",
        ",",
        "\\",
        "\\u",
        "\\ud800",
        "\\udc00",
        '\\u00"',
        "NaN",
        "Infinity",
        "-Infinity",
        "1e999999",
        "9" * 5000,
        "-0",
        "null",
        "true",
        '"$event"',
        '"$data"',
        '"stop"',
        '"end"',
        '"format_error"',
        "[" * 3000,
        '{"a":' * 1500,
        "\ud800",
        "\udfff",
        "\x00",
        "\x1b[",
        "z",
        "\ufeff",
        "\r",
        " ",
    ]
)
fuzzed_lines = st.one_of(
    st.lists(st.one_of(nasty_fragments, st.text(max_size=5)), max_size=8).map("".join),
    records.map(json.dumps).flatmap(
        lambda text: st.integers(0, len(text)).map(lambda cut: text[:cut])
    ),
    st.binary(max_size=40).map(lambda b: b.decode("utf-8", "replace")),
    st.text(max_size=30),
)
event_lines = st.builds(
    lambda name, data: json.dumps({"$event": name, "$data": data}),
    st.one_of(st.sampled_from(sorted(RESERVED_EVENTS) + ["stop", "error", "x"]), json_values),
    json_values,
)


# --- the runner's parser ----------------------------------------------------------------
def _check_events(lines: list[str], events: list[dict]) -> None:
    kept = [x for x in lines if x and not x.isspace()]
    assert len(events) == len(kept)
    for raw, ev in zip(kept, events, strict=True):
        assert ev["pipe"] == "data"
        assert ev["event"] not in RESERVED_EVENTS - {"format_error"}
        if ev["event"] == "format_error":
            assert ev["data"]["line"] == raw and isinstance(ev["data"]["error"], str)
        encode(ev["event"], ev["data"], ev["pipe"])  # whatever came in can be written


@fuzz_settings(500)
@given(st.lists(st.one_of(fuzzed_lines, event_lines), max_size=6))
def test_channel_never_raises(lines):
    _check_events(lines, feed(lines))


@fuzz_settings(300)
@given(st.lists(records, min_size=1, max_size=6))
def test_channel_round_trips_records(recs):
    lines = [json.dumps(r) for r in recs]
    events = feed(lines)
    assert [ev["event"] for ev in events] == ["data"] * len(recs)
    assert [ev["data"] for ev in events] == recs


@fuzz_settings(200)
@given(st.lists(records, min_size=1, max_size=4), st.integers(0, 3), fuzzed_lines)
def test_one_bad_line_spoils_only_itself(recs, where, bad):
    lines = [json.dumps(r) for r in recs]
    where = min(where, len(lines))
    lines.insert(where, bad)
    events = feed(lines)
    _check_events(lines, events)
    good = [ev["data"] for i, ev in enumerate(events) if i != where or not bad.strip()]
    if bad.strip():
        assert good == recs
        assert events[where]["event"] != "data" or isinstance(events[where]["data"], dict)


# --- smuggled records -------------------------------------------------------------------
plain_text = st.text(max_size=20).filter(lambda t: ESC not in t and "\x1b" not in t)


@fuzz_settings(300)
@given(st.lists(st.one_of(st.text(max_size=20), nasty_fragments), max_size=6))
def test_smuggle_decoder_never_raises(chunks):
    decoder = SmuggleDecoder()
    out = []
    for chunk in chunks:
        plain, recs = decoder.feed(chunk)
        assert isinstance(plain, str) and all(isinstance(r, str) for r in recs)
        out.append(plain)
    out.append(decoder.flush())
    if not any("\x1b" in c for c in chunks):
        assert "".join(out) == "".join(chunks)


@fuzz_settings(300)
@given(st.lists(st.tuples(plain_text, records), max_size=4), plain_text, st.integers(0, 10**6))
def test_smuggled_records_round_trip_across_any_cut(parts, tail, cut):
    lines = [json.dumps(r) for _, r in parts]
    stream = (
        "".join(text + smuggle_encode(line) for (text, _), line in zip(parts, lines, strict=True))
        + tail
    )
    cut = cut % (len(stream) + 1)
    decoder = SmuggleDecoder()
    plain1, recs1 = decoder.feed(stream[:cut])
    plain2, recs2 = decoder.feed(stream[cut:])
    assert recs1 + recs2 == lines
    assert plain1 + plain2 + decoder.flush() == "".join(t for t, _ in parts) + tail
    assert [ev["data"] for ev in feed(recs1 + recs2)] == [r for _, r in parts]


@fuzz_settings(200)
@given(st.text(alphabet="0123456789:;<=>?z\x1b[", max_size=40))
def test_smuggled_garbage_is_text_or_format_error(text):
    decoder = SmuggleDecoder()
    plain, recs = decoder.feed(text)
    plain += decoder.flush()
    assert isinstance(plain, str)
    _check_events(recs, feed(recs))


# --- the report reader ------------------------------------------------------------------
@fuzz_settings(200)
@given(
    st.lists(
        st.one_of(
            fuzzed_lines.map(lambda t: t.encode("utf-8", "surrogatepass")),
            st.binary(max_size=30),
            st.builds(
                lambda ev, data: encode(ev, data, "data").rstrip("\n").encode(),
                st.sampled_from(
                    [
                        "data",
                        "line",
                        "config",
                        "meta",
                        "start",
                        "end",
                        "stop",
                        "error",
                        "message",
                        "format_error",
                    ]
                ),
                st.one_of(json_values, records),
            ),
            st.builds(
                lambda rec: encode("data", rec, "data").rstrip("\n").encode(),
                st.fixed_dictionaries(
                    {},
                    optional={
                        k: json_values
                        for k in (
                            "rate",
                            "task",
                            "time",
                            "loss",
                            "progress",
                            "units",
                            "gpudata",
                            "process_tree",
                            "process",
                            "warmup",
                        )
                    },
                ),
            ),
        ),
        max_size=12,
    )
)
def test_report_reader_tolerates_any_data_file(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.D0.data"
        path.write_bytes(b"\n".join(lines) + b"\n")
        events = list(read_events(path))
        fr = read_file(path)
    assert fr.tag == "bench.D0"
    expected = sum(1 for ev in events if ev.get("event") == "format_error")
    assert fr.format_errors == expected


def test_channel_events_written_then_read_back(tmp_path):
    lines = ["{", '{"$event": "end"}', "[" * 100_000, '{"rate": NaN, "task": "train"}', "\x00"]
    events = feed(lines)
    path = tmp_path / "x.data"
    path.write_text("".join(encode(ev["event"], ev["data"], ev["pipe"]) for ev in events))
    fr = read_file(path)
    assert fr.format_errors == 4 and fr.n_data == 1 and math.isnan(fr.rates[0])
    assert decode("[" * 100_000) is None
