"""Live view of a run on the terminal (a sink: ``on_event(tag, event)`` and ``close()``).

Two renderings behind one factory, `make_dashboard`:

* `LiveDashboard` (a terminal and mode ``long``/``short``): one row per running
  benchmark process (``long``) or per benchmark (``short``) with its status, a progress
  bar with ETA from ``progress`` records, the latest rate and loss, and accelerator
  load/memory/temperature when known, under a global line (benchmarks done, elapsed).
  Finished rows are printed once, permanently, above the live block.
* `PlainDashboard` (not a terminal, or ``--dash no``): one line per start, end (with the
  return code), error and message, and a throttled rate line per process.

The runner calls ``on_event`` for every event, hundreds of thousands per run, so it only
updates a few fields (O(1), no I/O); the live block is redrawn by a background thread at
most ``fps`` times per second, never per event.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any

from milabench.events import as_float

_BAR_WIDTH = 20


@dataclass
class Row:
    """What is known about one process (tag) or one benchmark (short mode)."""

    tag: str
    name: str
    status: str = "starting"
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    progress: tuple[int, int] | None = None
    progress_t0: tuple[float, int] | None = None  # (time, k) of the first progress record
    progress_t: float = 0.0  # time of the latest progress record
    rate: float | None = None
    units: str = ""
    loss: float | None = None
    gpu: dict[str, Any] | None = None
    return_code: Any = None
    note: str = ""

    def eta(self) -> float | None:
        """Seconds left from the pace of progress records (None until it is known)."""
        if self.progress is None or self.progress_t0 is None:
            return None
        k, n = self.progress
        t0, k0 = self.progress_t0
        if k <= k0 or n <= 0:
            return None
        pace = (self.progress_t - t0) / (k - k0)
        return max(0.0, pace * (n - k))


def _benchmark_name(tag: str, event: dict) -> str:
    data = event.get("data")
    if event.get("event") == "config" and isinstance(data, dict) and data.get("name"):
        return str(data["name"])
    return tag.split(".", 1)[0]


def _gpu_summary(gpudata: dict) -> dict[str, Any]:
    """Mean load, summed memory, hottest temperature over the devices of a record."""
    loads, used, total, temps = [], 0.0, 0.0, []
    for dev in gpudata.values():
        if not isinstance(dev, dict):
            continue
        if isinstance(dev.get("load"), int | float):
            loads.append(float(dev["load"]))
        mem = dev.get("memory")
        if isinstance(mem, list | tuple) and len(mem) == 2:
            used += float(mem[0] or 0)
            total += float(mem[1] or 0)
        if isinstance(dev.get("temperature"), int | float):
            temps.append(float(dev["temperature"]))
    return {
        "load": sum(loads) / len(loads) if loads else None,
        "memory": (used, total) if total else None,
        "temperature": max(temps) if temps else None,
        "count": len(gpudata),
    }


class _State:
    """Event -> row updates shared by both renderings (cheap, no I/O)."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.finished: list[Row] = []
        self.names_seen: dict[str, None] = {}
        self.names_done: dict[str, None] = {}
        self.t0 = time.monotonic()
        self.version = 0

    def row(self, tag: str, event: dict) -> Row:
        row = self.rows.get(tag)
        if row is None:
            row = self.rows[tag] = Row(tag=tag, name=_benchmark_name(tag, event))
            self.names_seen.setdefault(row.name, None)
        return row

    def update(self, tag: str, event: dict) -> Row | None:
        name = event.get("event")
        if name == "line":
            return None  # the most frequent event: nothing to show
        data = event.get("data")
        row = self.row(tag, event)
        if name == "data" and isinstance(data, dict):
            if "rate" in data:
                rate = as_float(data["rate"])
                if rate is not None:
                    row.rate = rate
                    row.units = str(data.get("units", ""))
            elif "loss" in data:
                row.loss = as_float(data["loss"])
            elif "progress" in data:
                prog = data["progress"]
                if isinstance(prog, list | tuple) and len(prog) == 2:
                    now = time.monotonic()
                    try:
                        k, n = int(prog[0]), int(prog[1])
                    except (TypeError, ValueError):
                        return row
                    row.progress = (k, n)
                    row.progress_t = now
                    if row.progress_t0 is None:
                        row.progress_t0 = (now, k)
            elif "gpudata" in data and isinstance(data["gpudata"], dict):
                row.gpu = _gpu_summary(data["gpudata"])
            else:
                return row
        elif name == "config":
            row.name = _benchmark_name(tag, event)
            self.names_seen.setdefault(row.name, None)
        elif name == "start":
            row.status = "running"
            row.started = time.monotonic()
        elif name == "phase" and isinstance(data, dict):
            row.note = str(data.get("name", ""))
        elif name == "stop":
            row.status = "stopping"
        elif name == "error" and isinstance(data, dict):
            row.note = f"{data.get('type', 'error')}: {data.get('message', '')}"
        elif name == "message" and isinstance(data, dict):
            row.note = str(data.get("message", ""))
        elif name == "end":
            rc = data.get("return_code") if isinstance(data, dict) else None
            row.return_code = rc
            row.ended = time.monotonic()
            row.status = "done" if rc == 0 else ("skipped" if rc == "SKIPPED" else "failed")
            if row.status == "done" and row.progress and row.progress[1]:
                row.progress = (row.progress[1], row.progress[1])
            self.rows.pop(tag, None)
            self.finished.append(row)
            if not any(r.name == row.name for r in self.rows.values()):
                self.names_done.setdefault(row.name, None)
        else:
            return row
        self.version += 1
        return row


def _clock(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "--:--"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if value != value:
        return "NaN"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


class PlainDashboard:
    """Line per notable event; rate lines at most every ``rate_every`` s per process."""

    def __init__(self, stream: IO[str], *, rate_every: float = 5.0) -> None:
        self.stream = stream
        self.rate_every = rate_every
        self._last_rate: dict[str, float] = {}

    def _print(self, text: str) -> None:
        try:
            self.stream.write(text.rstrip() + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def on_event(self, tag: str, event: dict) -> None:
        name = event.get("event")
        if name == "line":
            return
        data = event.get("data")
        if name == "data":
            if isinstance(data, dict) and "rate" in data:
                now = time.monotonic()
                if now - self._last_rate.get(tag, -math.inf) >= self.rate_every:
                    self._last_rate[tag] = now
                    rate = as_float(data["rate"])
                    self._print(
                        f"[{tag}] {data.get('task', 'train')} rate {_number(rate)} {data.get('units', '')}"
                    )
            return
        if name == "start":
            command = " ".join(map(str, (data or {}).get("command") or []))
            self._print(f"[{tag}] start {command}")
        elif name == "end":
            self._print(f"[{tag}] end (return code {(data or {}).get('return_code')})")
        elif name == "stop":
            self._print(f"[{tag}] early stop: observation budget reached")
        elif name in ("error", "message") and isinstance(data, dict):
            self._print(f"[{tag}] {name}: {data.get('message', '')}")

    def close(self) -> None:
        pass


class LiveDashboard:
    """Redrawn block of rows (blessed) on a terminal; see the module doc."""

    def __init__(
        self,
        stream: IO[str],
        mode: str = "long",
        *,
        total: int | None = None,
        fps: float = 4.0,
    ) -> None:
        from blessed import Terminal

        self.stream = stream
        self.mode = mode
        self.total = total
        self.term = Terminal(stream=stream)
        self.state = _State()
        self._drawn_lines = 0
        self._printed_finished = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._period = 1.0 / fps
        self._thread = threading.Thread(target=self._loop, name="milabench-dashboard", daemon=True)
        self._thread.start()

    def set_total(self, total: int) -> None:
        """Number of benchmarks the run will go through (for the global line)."""
        self.total = total

    def on_event(self, tag: str, event: dict) -> None:
        self.state.update(tag, event)

    # -- drawing (background thread) --------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            self.draw()

    def draw(self) -> None:
        with self._lock:
            try:
                self._draw()
            except (OSError, ValueError):
                pass

    def _draw(self) -> None:
        term = self.term
        width = max(40, term.width or 100)
        out: list[str] = []
        if self._drawn_lines:
            out.append(term.move_up(self._drawn_lines) + "\r" + term.clear_eos)
        finished = self.state.finished
        while self._printed_finished < len(finished):
            row = finished[self._printed_finished]
            out.append(self._finished_line(row)[:width] + "\n")
            self._printed_finished += 1
        lines = [self._global_line()]
        rows = list(self.state.rows.values())
        if self.mode == "short":
            rows = _merge_by_benchmark(rows)
        tag_width = min(28, max((len(r.tag) for r in rows), default=0))
        lines.extend(self._row_line(r, tag_width) for r in rows)
        for line in lines:
            out.append(term.truncate(line, width) + term.clear_eol + "\n")
        self._drawn_lines = len(lines)
        self.stream.write("".join(out))
        self.stream.flush()

    def _global_line(self) -> str:
        st = self.state
        done = len(st.names_done)
        total = self.total if self.total is not None else len(st.names_seen)
        running = len(st.rows)
        failed = sum(1 for r in st.finished if r.status == "failed")
        elapsed = _clock(time.monotonic() - st.t0)
        text = f"milabench  {done}/{total} benchmarks finished  {running} running"
        if failed:
            text += f"  {failed} failed"
        return self.term.bold(text) + f"  elapsed {elapsed}"

    def _bar(self, row: Row) -> str:
        if row.progress is None or not row.progress[1]:
            return "[" + " " * _BAR_WIDTH + "]" + "       "
        k, n = row.progress
        filled = min(_BAR_WIDTH, int(_BAR_WIDTH * k / n))
        bar = "█" * filled + "░" * (_BAR_WIDTH - filled)
        return f"[{self.term.green(bar)}] {k:>3}/{n:<3}"

    def _row_line(self, row: Row, tag_width: int) -> str:
        term = self.term
        status = {
            "running": term.cyan("running"),
            "stopping": term.yellow("stopping"),
            "starting": term.yellow("starting"),
        }.get(row.status, row.status)
        parts = [
            f"{row.tag:<{tag_width}}",
            term.ljust(status, 8),
            self._bar(row),
            f"ETA {_clock(row.eta())}",
        ]
        if row.rate is not None:
            parts.append(f"{_number(row.rate):>8} {row.units}")
        if row.loss is not None:
            parts.append(f"loss {_number(row.loss, 4)}")
        if row.gpu:
            g = row.gpu
            bits = []
            if g.get("load") is not None:
                bits.append(f"{g['load'] * 100:.0f}%")
            if g.get("memory"):
                used, total = g["memory"]
                bits.append(f"{used / 1024:.1f}/{total / 1024:.1f}GiB")
            if g.get("temperature") is not None:
                bits.append(f"{g['temperature']:.0f}C")
            parts.append("gpu " + " ".join(bits))
        if row.note and row.status != "running":
            parts.append(row.note)
        return "  ".join(parts)

    def _finished_line(self, row: Row) -> str:
        term = self.term
        mark = {"done": term.green("done   "), "skipped": term.yellow("skipped")}.get(
            row.status, term.red("failed ")
        )
        duration = _clock((row.ended or time.monotonic()) - row.started)
        text = f"{mark} {row.tag:<24} rc={row.return_code}  {duration}"
        if row.rate is not None:
            text += f"  last {_number(row.rate)} {row.units}"
        if row.loss is not None:
            text += f"  loss {_number(row.loss, 4)}"
        if row.status != "done" and row.note:
            text += f"  {row.note}"
        return text

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self.draw()


def _merge_by_benchmark(rows: list[Row]) -> list[Row]:
    """Short mode: one row per benchmark (rates summed, slowest progress, worst status)."""
    merged: dict[str, Row] = {}
    for row in rows:
        m = merged.get(row.name)
        if m is None:
            m = merged[row.name] = Row(tag=row.name, name=row.name, status=row.status)
            m.started = row.started
            m.progress, m.progress_t0, m.progress_t = row.progress, row.progress_t0, row.progress_t
            m.rate, m.units, m.loss, m.gpu, m.note = (
                row.rate,
                row.units,
                row.loss,
                row.gpu,
                row.note,
            )
            continue
        if row.rate is not None:
            m.rate = (m.rate or 0.0) + row.rate
            m.units = row.units
        if row.progress and (m.progress is None or row.progress[0] < m.progress[0]):
            m.progress, m.progress_t0, m.progress_t = row.progress, row.progress_t0, row.progress_t
        if row.status != "running":
            m.status = row.status
    return list(merged.values())


def make_dashboard(
    mode: str = "long", stream: IO[str] | None = None, *, total: int | None = None
) -> LiveDashboard | PlainDashboard:
    """The live dashboard on a terminal for ``long``/``short``, else plain lines."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if mode in ("long", "short") and isatty is not None and isatty():
        try:
            return LiveDashboard(stream, mode, total=total)
        except ImportError:  # blessed missing: plain output still works
            pass
    return PlainDashboard(stream)
