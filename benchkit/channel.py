"""The data channel between a benchmark process and the orchestrator.

Records are JSON lines written to the file descriptor named by ``DATA_FD`` (a pipe the
orchestrator created). When a launcher does not pass extra descriptors to its workers
(torchrun, accelerate), ``DATA_FD=1`` asks for records to be hidden in standard output as
escape sequences: ``ESC [`` + the hex of the UTF-8 line with hex digits 0-9a-f written as
the characters ``0-9:;<=>?`` + ``z``. Terminals ignore such sequences, and
`SmuggleDecoder` separates them from the normal text again.

`DataWriter` batches records in memory and writes them with one system call per flush, so
that recording a step costs microseconds rather than a write per step.
"""

from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from typing import Any

ESC = "\x1b["
END = "z"
PIPE_BUF = getattr(select, "PIPE_BUF", 4096)
_TO_SMUGGLE = str.maketrans("abcdef", ":;<=>?")
_FROM_SMUGGLE = str.maketrans(":;<=>?", "abcdef")


def smuggle_encode(line: str) -> str:
    """One JSON line (without newline) as an invisible escape sequence."""
    return ESC + line.encode("utf-8").hex().translate(_TO_SMUGGLE) + END


def smuggle_decode(body: str) -> str:
    """The inside of a sequence (between ``ESC [`` and ``z``) back to the JSON text."""
    return bytes.fromhex(body.translate(_FROM_SMUGGLE)).decode("utf-8")


_SMUGGLE_CHARS = frozenset("0123456789:;<=>?")


class SmuggleDecoder:
    """Stateful splitter of a text stream into plain text and smuggled JSON lines.

    ``feed(text)`` returns ``(plain, records)``: the text with every complete smuggled
    sequence removed, and the decoded JSON strings in order. A sequence cut across two
    feeds is kept until its end arrives. An escape sequence that is not ours (colours,
    cursor moves) is passed through untouched.
    """

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, text: str) -> tuple[str, list[str]]:
        data = self._pending + text
        self._pending = ""
        if data.endswith(ESC[0]):
            # ``ESC`` cut from its ``[``: hold it back until the next feed tells.
            data, self._pending = data[:-1], ESC[0]
        if ESC not in data:
            return data, []
        plain: list[str] = []
        records: list[str] = []
        pos = 0
        n = len(data)
        while True:
            start = data.find(ESC, pos)
            if start < 0:
                plain.append(data[pos:])
                break
            plain.append(data[pos:start])
            i = start + 2
            while i < n and data[i] in _SMUGGLE_CHARS:
                i += 1
            if i >= n:
                # Sequence not finished yet: wait for more text.
                self._pending = data[start:] + self._pending
                break
            if data[i] == END and i > start + 2:
                body = data[start + 2 : i]
                try:
                    records.append(smuggle_decode(body))
                except ValueError:
                    plain.append(data[start : i + 1])
                pos = i + 1
            else:
                # Not one of ours (e.g. a colour code): keep it as text.
                plain.append(data[start : i + 1])
                pos = i + 1
        return "".join(plain), records

    def flush(self) -> str:
        """Whatever is still pending at the end of the stream, as plain text."""
        rest, self._pending = self._pending, ""
        return rest


# One encoder for the process: ``json.dumps`` with options builds a new one per call,
# which costs more than encoding a small record.
_encode = json.JSONEncoder(allow_nan=False, default=repr).encode


def _dumps(obj: Any) -> str:
    try:
        return _encode(obj)
    except ValueError:  # NaN / inf
        return json.dumps(_fix_floats(obj), default=repr)


def _fix_floats(obj: Any) -> Any:
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return "NaN" if obj != obj else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: _fix_floats(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_fix_floats(v) for v in obj]
    return obj


class DataWriter:
    """Batched writer of metric records to the data channel.

    * ``DATA_FD`` set to a descriptor other than 1: raw JSON lines to that descriptor.
    * ``DATA_FD=1``: smuggled into standard output.
    * No ``DATA_FD``: records go nowhere unless ``MILABENCH_DATA_STDOUT=1`` (handy when
      running a benchmark by hand), in which case they are printed as plain JSON lines.

    ``write(record)`` only appends to a list; the list is written when it reaches
    ``batch`` records, when ``flush_interval`` seconds passed since the last flush (checked
    on write), or on ``flush()``/``close()``. Thread-safe, so monitors may share it.
    """

    def __init__(
        self,
        fd: int | None = None,
        *,
        batch: int = 256,
        flush_interval: float = 1.0,
        smuggle: bool | None = None,
    ) -> None:
        if fd is None:
            env_fd = os.environ.get("DATA_FD")
            fd = int(env_fd) if env_fd not in (None, "") else None
        if fd is None and os.environ.get("MILABENCH_DATA_STDOUT") == "1":
            fd, smuggle = 1, False
        self.fd = fd
        self.smuggle = (fd == 1) if smuggle is None else smuggle
        self.batch = batch
        self.flush_interval = flush_interval
        self._buffer: list[str] = []
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.fd is not None

    def write(self, record: dict) -> None:
        if self.fd is None:
            return
        line = _dumps(record)
        with self._lock:
            self._buffer.append(line)
            full = len(self._buffer) >= self.batch
        if full or time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def write_encoded(self, lines: list[str]) -> None:
        """Append already-encoded JSON lines (no newline): one lock for many records,
        for producers that format their own records (`benchkit.records`)."""
        if self.fd is None or not lines:
            return
        with self._lock:
            self._buffer.extend(lines)
            full = len(self._buffer) >= self.batch
        if full or time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def event(self, name: str, data: Any = None) -> None:
        """An event other than a metric record (``{"$event": name, "$data": data}``)."""
        self.write({"$event": name, "$data": data})

    def flush(self) -> None:
        with self._lock:
            lines, self._buffer = self._buffer, []
            self._last_flush = time.monotonic()
        if not lines or self.fd is None:
            return
        if self.smuggle:
            text = "".join(smuggle_encode(x) for x in lines) + "\n"
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        for chunk in _line_chunks(lines):
            view = memoryview(chunk)
            while view:
                try:
                    written = os.write(self.fd, view)
                except InterruptedError:
                    continue
                except OSError:
                    # Reader gone (EPIPE) or descriptor closed under us (voir closes its
                    # logger at finalize): records have nowhere to go.
                    self.fd = None
                    return
                view = view[written:]

    def close(self) -> None:
        self.flush()

    def detach(self) -> None:
        """Flush, then stop writing: the descriptor belongs to someone who will close it
        (voir's overseer closes ``DATA_FD`` at the end of its run, and the number could be
        reused for an unrelated file afterwards)."""
        self.flush()
        with self._lock:
            self.fd = None


def _line_chunks(lines: list[str]) -> list[bytes]:
    """Encoded lines grouped in chunks of at most ``PIPE_BUF`` bytes ending on a newline.

    A pipe write of at most ``PIPE_BUF`` bytes is atomic, so when several writers share
    the pipe (voir's overseer and benchkit) no record is cut by another one. A single
    line longer than ``PIPE_BUF`` gets a chunk of its own (it cannot be atomic anyway).
    """
    chunks: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for line in lines:
        data = line.encode("utf-8") + b"\n"
        if current and size + len(data) > PIPE_BUF:
            chunks.append(b"".join(current))
            current, size = [], 0
        current.append(data)
        size += len(data)
    if current:
        chunks.append(b"".join(current))
    return chunks


_default_writer: DataWriter | None = None


def default_writer() -> DataWriter:
    """The process-wide writer (created on first use, flushed at exit)."""
    global _default_writer
    if _default_writer is None:
        import atexit

        _default_writer = DataWriter()
        atexit.register(_default_writer.close)
    return _default_writer


def warn(text: str, kind: str) -> None:
    """One line on stderr and, on rank 0 (``RANK`` unset, empty or 0), a ``message``
    event marked ``warning: <kind>``, which the report lists. Never raises: the stderr
    line is the note when the channel cannot be written."""
    import os
    import sys

    print(text, file=sys.stderr, flush=True)
    if os.environ.get("RANK", "0") not in ("", "0"):
        return
    try:
        writer = default_writer()
        writer.event("message", {"message": text, "warning": kind})
        writer.flush()
    except Exception:  # noqa: BLE001 - the stderr line is the note
        pass
