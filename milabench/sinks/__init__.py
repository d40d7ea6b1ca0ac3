"""Subscribers to the event stream: ``on_event(tag, event)`` and ``close()``.

`RunFileSink` writes the run folder; `milabench.sinks.dashboard` (if present) shows
live progress; `PlainPrinter` is the fallback that prints one line per notable event.
Sinks never call each other. Optional: ``on_events(tag, events)`` receives a chunk of
events of one tag at once (much cheaper at >100k data records/s); keys of an event that
start with ``_`` are transport hints (see `milabench.execute`), not event fields.
"""

from __future__ import annotations

import sys
from typing import IO, Protocol


class Sink(Protocol):
    def on_event(self, tag: str, event: dict) -> None: ...

    def close(self) -> None: ...


class PlainPrinter:
    """One line per start/end/error/message and per rate record (no terminal tricks)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def on_event(self, tag: str, event: dict) -> None:
        name = event.get("event")
        data = event.get("data")
        if name == "start":
            line = f"[{tag}] start: {' '.join(map(str, (data or {}).get('command', [])))}"
        elif name == "end":
            line = f"[{tag}] end: return code {(data or {}).get('return_code')}"
        elif name in ("error", "message"):
            line = f"[{tag}] {name}: {(data or {}).get('message', data)}"
        elif name == "data" and isinstance(data, dict) and "rate" in data:
            line = f"[{tag}] {data.get('task', '')} rate {data['rate']} {data.get('units', '')}"
        else:
            return
        try:
            self.stream.write(line.rstrip() + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        pass


def make_console_sink(
    mode: str, stream: IO[str] | None = None, *, total: int | None = None
) -> Sink | None:
    """The dashboard for ``mode`` (long/short/no); the plain printer when unavailable.

    ``total`` is the number of benchmark runs planned (for the global progress line).
    """
    stream = stream or sys.stdout
    from milabench.sinks.dashboard import make_dashboard  # falls back to plain lines itself

    return make_dashboard(mode, stream, total=total)


__all__ = ["PlainPrinter", "Sink", "make_console_sink"]
