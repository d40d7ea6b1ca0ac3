"""DataWriter through real pipes and real child processes."""

import json
import os
import subprocess
import sys
import textwrap

from benchkit.channel import PIPE_BUF, DataWriter, SmuggleDecoder, _line_chunks, smuggle_encode


def test_chunks_end_on_lines_and_fit_pipe_buf():
    lines = [json.dumps({"i": i, "pad": "x" * (i % 200)}) for i in range(500)]
    chunks = _line_chunks(lines)
    assert len(chunks) > 1
    assert all(len(c) <= PIPE_BUF and c.endswith(b"\n") for c in chunks)
    assert b"".join(chunks).decode().splitlines() == lines


def test_oversized_line_gets_its_own_chunk():
    big = "y" * (PIPE_BUF * 2)
    chunks = _line_chunks(["a", big, "b"])
    assert chunks == [b"a\n", (big + "\n").encode(), b"b\n"]


def test_batches_until_flush(pipe):
    writer = DataWriter(pipe.write_fd, batch=1000, flush_interval=3600)
    for i in range(10):
        writer.write({"i": i})
    assert len(writer._buffer) == 10  # nothing written yet: batched in memory
    writer.flush()
    writer.write({"rate": float("nan")})
    writer.event("stop", {"why": "budget"})
    writer.close()
    records = pipe.records()
    assert [r["i"] for r in records[:10]] == list(range(10))
    assert records[10] == {"rate": "NaN"}
    assert records[11] == {"$event": "stop", "$data": {"why": "budget"}}


def test_batch_size_triggers_write(pipe):
    writer = DataWriter(pipe.write_fd, batch=4, flush_interval=3600)
    for i in range(8):
        writer.write({"i": i})
    assert writer._buffer == []
    assert len(pipe.records()) == 8


_WRITER_CHILD = textwrap.dedent(
    """
    import sys
    from benchkit.channel import DataWriter
    who = sys.argv[1]
    w = DataWriter(batch=10_000, flush_interval=3600)   # fd from DATA_FD
    for i in range(20_000):
        w.write({"who": who, "i": i, "pad": "z" * (i % 97)})
        if i % 3000 == 2999:
            w.flush()      # flushes far larger than PIPE_BUF
    w.close()
    """
)


def test_two_processes_sharing_a_pipe_never_interleave(pipe):
    """voir's overseer and benchkit share DATA_FD: records must stay whole lines."""
    env = dict(os.environ, DATA_FD=str(pipe.write_fd))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER_CHILD, who], env=env, pass_fds=[pipe.write_fd]
        )
        for who in ("a", "b")
    ]
    pipe.close_writer()
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    records = pipe.records()  # json.loads of every line: a cut line would raise
    for who in ("a", "b"):
        assert [r["i"] for r in records if r["who"] == who] == list(range(20_000))


def test_smuggled_records_through_a_child_stdout():
    code = textwrap.dedent(
        """
        from benchkit.channel import DataWriter
        print("hello \\x1b[1mbold\\x1b[0m", flush=True)
        w = DataWriter()          # DATA_FD=1: smuggled into stdout
        for i in range(300):
            w.write({"task": "train", "rate": float(i), "unit": "é"})
            if i == 150:
                print("middle", flush=True)
        w.close()
        print("bye")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, DATA_FD="1"),
        capture_output=True,
        check=True,
    ).stdout.decode()
    decoder = SmuggleDecoder()
    plain, records = [], []
    # Feed in awkward pieces: sequences are cut across feeds.
    for start in range(0, len(out), 777):
        text, recs = decoder.feed(out[start : start + 777])
        plain.append(text)
        records.extend(recs)
    plain.append(decoder.flush())
    text = "".join(plain)
    assert "hello \x1b[1mbold\x1b[0m" in text and "middle" in text and "bye" in text
    assert "\x1b[3" not in text.replace("\x1b[0m", "").replace("\x1b[1m", "")
    assert [json.loads(r)["rate"] for r in records] == [float(i) for i in range(300)]
    assert json.loads(records[0])["unit"] == "é"


def test_smuggle_encoding_is_invisible_text():
    seq = smuggle_encode('{"a": 1}')
    assert seq.startswith("\x1b[") and seq.endswith("z")
    assert set(seq[2:-1]) <= set("0123456789:;<=>?")


def test_closed_reader_disables_writer():
    r, w = os.pipe()
    os.close(r)
    writer = DataWriter(w)
    writer.write({"x": 1})
    writer.flush()  # EPIPE (SIGPIPE is ignored by Python): no exception
    assert writer.fd is None
    os.close(w)


def test_detach_stops_writing(pipe):
    writer = DataWriter(pipe.write_fd, flush_interval=3600)
    writer.write({"x": 1})
    writer.detach()
    writer.write({"x": 2})
    writer.flush()
    assert pipe.records() == [{"x": 1}]
