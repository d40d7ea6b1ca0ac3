"""Line splitting of process streams, in batches.

The runner must ingest well over 100,000 data lines per second, so streams are read in
64 KiB chunks and handed over as *lists* of complete lines: one await per chunk instead
of one per line. A line longer than `MAX_LINE` is cut rather than held in memory forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

CHUNK = 1 << 16
MAX_LINE = 8 << 20


async def line_batches(reader: asyncio.StreamReader) -> AsyncIterator[list[str]]:
    """Complete lines (without the newline, ``\\r\\n`` tolerated) as they arrive."""
    pending = b""
    while True:
        chunk = await reader.read(CHUNK)
        if not chunk:
            break
        if b"\n" not in chunk:
            pending += chunk
            if len(pending) > MAX_LINE:
                yield [pending.decode("utf-8", "replace")]
                pending = b""
            continue
        parts = (pending + chunk).split(b"\n")
        pending = parts.pop()
        yield [_text(p) for p in parts]
    if pending:
        yield [_text(pending)]


def _text(raw: bytes) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw.decode("utf-8", "replace")
