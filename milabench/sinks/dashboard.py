"""Live view of a run on the terminal (a sink: ``on_event(tag, event)`` and ``close()``).

`make_dashboard` gives a `LiveDashboard` on a terminal (mode ``long``: one row per
running process, ``short``: per benchmark; status, progress bar with ETA, latest rate
and loss, accelerator load/memory/temperature, under a global line; finished rows
printed once above the live block) or a `PlainDashboard` (not a terminal, or ``--dash
no``: one line per start, end, error, message, end of warm-up and window, and a
throttled rate line per process). Both say what the report will say: events are decoded
by the report's own decoder (`milabench.rundata.records`), a finished process's status
is `milabench.rundata.outcome.status` of the facts seen in them, never the return code
alone, and numbers go through `milabench.rundata.numbers`.
``on_event`` only updates a few fields (O(1), no I/O: it sees every event of the run);
a background thread redraws the live block at most ``fps`` times per second. What a row
shows: docs/architecture.md "Events and sinks"; sample screens: docs/dashboard.txt.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any

from milabench.events import as_float
from milabench.rundata import outcome
from milabench.rundata import records as rec
from milabench.rundata.numbers import fmt_bytes, fmt_sig
from milabench.rundata.reader import split_tag

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
    # What the success rule needs (`outcome.Facts`), gathered as the events go by.
    observations: int = 0  # `rate` records of task train
    nan_loss: bool = False
    errors: int = 0
    early_stop: bool = False
    skipped: bool = False
    has_end: bool = False
    required: int = 1
    detail: str = ""  # `outcome.detail` once finished ("" for a success)
    # Measurement phases (docs/measurement.md section 3) and memory.
    warmup: dict | None = None  # the `warmup` record: measurement has begun
    window: dict | None = None  # the `window` record: measurement is over
    peak_rss: float | None = None  # bytes, from the runner's `process_tree` records

    def facts(self, rates_elsewhere: bool = False) -> outcome.Facts:
        return outcome.Facts(
            skipped=self.skipped,
            early_stop=self.early_stop,
            has_end=self.has_end,
            return_code=self.return_code,
            observations=self.observations,
            nan_loss=self.nan_loss,
            errors=self.errors,
            rates_elsewhere=rates_elsewhere,
            required=self.required,
        )

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


def _benchmark_name(tag: str, items: tuple[rec.Item, ...]) -> str:
    for item in items:
        if isinstance(item, rec.Config) and item.data.get("name"):
            return str(item.data["name"])
    return tag.split(".", 1)[0]


def _group_key(tag: str, name: str) -> tuple[str, bool]:
    """The tag without its node part, and whether it had one (a multi-node rank)."""
    _, info = split_tag(tag, name)
    if info["node"] is None:
        return tag, False
    return tag[: -len(info["node"]) - 1], True


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
    """Decoded events -> row updates shared by both renderings (cheap, no I/O)."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.finished: list[Row] = []
        self.names_seen: dict[str, None] = {}
        self.names_done: dict[str, None] = {}
        self.t0 = time.monotonic()
        self.version = 0
        self.decoder = rec.Decoder()  # its `unknown` counts what the view ignored

    def row(self, tag: str, items: tuple[rec.Item, ...] = ()) -> Row:
        row = self.rows.get(tag)
        if row is None:
            row = self.rows[tag] = Row(tag=tag, name=_benchmark_name(tag, items))
            self.names_seen.setdefault(row.name, None)
        return row

    def update(self, tag: str, event: dict) -> Row | None:
        return self.apply(tag, event)[0]

    def apply(self, tag: str, event: dict) -> tuple[Row | None, tuple[rec.Item, ...]]:
        """The row of ``tag`` after ``event``, and the event's decoded values."""
        if event.get("event") == "line":
            return None, ()  # the most frequent event: nothing to show
        items = self.decoder.event(event)
        row = self.row(tag, items)
        for item in items:
            if self._apply(tag, row, item):
                self.version += 1
        return row, items

    def _apply(self, tag: str, row: Row, item: rec.Item) -> bool:
        """Fold one decoded value into the row; whether the view changed beyond a rate."""
        match item:
            case rec.Rate(task=task, value=value, units=units):  # the hot path
                row.rate = value
                row.units = "" if units is None else units
                if task == "train":
                    row.observations += 1
                return False
            case rec.Loss(value=value):
                row.loss = value
                if not math.isfinite(value):
                    row.nan_loss = True
            case rec.Progress(done=done, total=total):
                if item.stops:
                    row.early_stop = True  # the report's rule
                if done is None or total is None:
                    return False
                if not (math.isfinite(done) and math.isfinite(total)):
                    return False
                now = time.monotonic()
                k, n = int(done), int(total)
                row.progress = (k, n)
                row.progress_t = now
                if row.progress_t0 is None:
                    row.progress_t0 = (now, k)
            case rec.Sample(kind="gpudata", data=data):
                row.gpu = _gpu_summary(data)
            case rec.Sample(kind="warmup", data=data):
                row.warmup = data
            case rec.Sample(kind="window", data=data):
                row.window = data
                row.warmup = row.warmup or {}
            case rec.ProcessTree(peak_rss=peak):
                if peak is None:
                    return False
                row.peak_rss = max(peak, row.peak_rss or 0.0)
            case rec.Config(data=data):
                row.name = _benchmark_name(tag, (item,))
                self.names_seen.setdefault(row.name, None)
                row.required = outcome.required_of(data.get("measure"))
            case rec.Start():
                row.status = "running"
                row.started = time.monotonic()
            case rec.Phase(name=name):
                row.note = name
            case rec.Stop():
                row.status = "stopping"
                row.early_stop = True
            case rec.Error(data=data):
                row.errors += 1
                row.note = f"{data.get('type', 'error')}: {data.get('message', '')}"
            case rec.Message(is_object=True):
                row.note = item.text or ""
                if item.skipped:
                    row.skipped = True
            case rec.End():
                self._finish(tag, row, item)
            case _:
                return False
        return True

    def _finish(self, tag: str, row: Row, end: rec.End) -> None:
        """The process is over: its status from the one success rule, then it moves on."""
        row.return_code = end.return_code
        row.has_end = True
        row.ended = time.monotonic()
        if end.early_stop:
            row.early_stop = True
        if end.skipped:
            row.skipped = True
        # A multi-node rank without rates succeeds when another rank of its launch has them.
        group, ranked = _group_key(tag, row.name)
        elsewhere = ranked and any(
            r.observations and _group_key(r.tag, r.name)[0] == group
            for r in (*self.rows.values(), *self.finished)
            if r is not row
        )
        facts = row.facts(rates_elsewhere=elsewhere)
        status = outcome.status(facts)
        row.detail = outcome.detail(facts, status)
        row.status = "done" if status == outcome.SUCCESS else status
        if row.status == "done" and row.progress and row.progress[1]:
            row.progress = (row.progress[1], row.progress[1])
        self.rows.pop(tag, None)
        self.finished.append(row)
        if not any(r.name == row.name for r in self.rows.values()):
            self.names_done.setdefault(row.name, None)


def _clock(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "--:--"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _pct(fraction: Any) -> str:
    """A relative figure (0.015) as a percentage with 2 significant digits: ``1.5%``."""
    value = as_float(fraction)
    return "-" if value is None else f"{fmt_sig(value * 100, 2)}%"


def _count(value: Any) -> str:
    """A count (steps, observations) exactly: rounding 12,345 steps to 12,300 helps no one."""
    number = as_float(value)
    return "-" if number is None or not math.isfinite(number) else f"{int(number):,}"


def _window_text(window: dict, units: str) -> str:
    """``812 items/s ±1.5% (target ±2%: met)`` from a `window` record."""
    text = f"{fmt_sig(as_float(window.get('mean')))} {units}".rstrip()
    if window.get("halfwidth") is not None:
        text += f" ±{_pct(window['halfwidth'])}"
    target = f"target ±{_pct(window.get('target'))}"
    if window.get("met"):
        return f"{text} ({target}: met)"
    reason = window.get("reason")
    return f"{text} ({target}: not met" + (f", {reason})" if reason else ")")


def _rate_text(row: Row) -> str:
    """Warm-up, then the live rate, then the measured window (see the module doc)."""
    if row.window is not None:
        return _window_text(row.window, row.units)
    if row.rate is not None:  # right-aligned: the live rates of the rows line up
        return f"{fmt_sig(row.rate):>8} {row.units}".rstrip()
    if row.warmup is None and row.status == "running":
        return "warm-up"
    return ""


def _loss_text(loss: float) -> str:
    """``fmt_sig`` prints NaN as missing ("-"); a NaN loss is a finding and says so."""
    return "NaN" if math.isnan(loss) else fmt_sig(loss)


def _gpu_text(g: dict[str, Any]) -> str:
    bits = []
    if g.get("load") is not None:
        bits.append(f"{fmt_sig(g['load'] * 100)}%")
    if g.get("memory"):
        used, total = g["memory"]  # MiB
        bits.append(f"{fmt_sig(used / 1024)}/{fmt_sig(total / 1024)}GiB")
    if g.get("temperature") is not None:
        bits.append(f"{fmt_sig(g['temperature'])}C")
    return "gpu " + " ".join(bits)


def _end_text(row: Row) -> str:
    """``done`` or the status with the rule's reason: ``failed (NaN loss ...)``."""
    if row.status == "done" or not row.detail or row.detail == row.status:
        return row.status
    return f"{row.status} ({row.detail})"


class PlainDashboard:
    """Line per notable event; rate lines at most every ``rate_every`` s per process."""

    def __init__(self, stream: IO[str], *, rate_every: float = 5.0) -> None:
        self.stream = stream
        self.rate_every = rate_every
        self.state = _State()
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
        row, items = self.state.apply(tag, event)
        for item in items:
            self._show(tag, row, item)

    def _show(self, tag: str, row: Row | None, item: rec.Item) -> None:
        """The line a decoded value deserves, if any."""
        match item:
            case rec.Rate(task=task, value=value, units=units):
                now = time.monotonic()
                if now - self._last_rate.get(tag, -math.inf) >= self.rate_every:
                    self._last_rate[tag] = now
                    task = "train" if task is None else task
                    self._print(f"[{tag}] {task} rate {fmt_sig(value)} {units or ''}")
            case rec.Sample(kind="warmup", data=w):
                settled = "settled" if w.get("settled") else "not settled"
                self._print(
                    f"[{tag}] warm-up over after {fmt_sig(as_float(w.get('seconds')))} s"
                    f" ({_count(w.get('observations'))} steps, {settled})"
                )
            case rec.Sample(kind="window", data=w) if row is not None:
                self._print(
                    f"[{tag}] window: {_window_text(w, row.units)}"
                    f" over {fmt_sig(as_float(w.get('measured_s')))} s,"
                    f" {_count(w.get('observations'))} observations"
                )
            case rec.Start(command=command):
                self._print(f"[{tag}] start {' '.join(map(str, command))}")
            case rec.End() if row is not None:
                text = f"[{tag}] end: {_end_text(row)} (return code {row.return_code})"
                if row.peak_rss is not None:
                    text += f", peak memory {fmt_bytes(row.peak_rss)}"
                self._print(text)
            case rec.Stop(reason=reason):
                why = "measurement window over" if reason == "window" else reason
                self._print(f"[{tag}] early stop: {why or 'observation budget reached'}")
            case rec.Error(kind="error", data=data):
                self._print(f"[{tag}] error: {data.get('message', '')}")
            case rec.Message(is_object=True, text=text):
                self._print(f"[{tag}] message: {text or ''}")

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
        failed = sum(1 for r in st.finished if r.status not in ("done", "skipped"))
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
        rate = _rate_text(row)
        if rate:
            parts.append(rate)
        if row.loss is not None:
            parts.append(f"loss {_loss_text(row.loss)}")
        if row.peak_rss is not None:
            parts.append(f"mem {fmt_bytes(row.peak_rss)}")
        if row.gpu:
            parts.append(_gpu_text(row.gpu))
        if row.note and row.status != "running":
            parts.append(row.note)
        return "  ".join(parts)

    def _finished_line(self, row: Row) -> str:
        term = self.term
        label = row.status.ljust(7)
        mark = {"done": term.green(label), "skipped": term.yellow(label)}.get(
            row.status, term.red(label)
        )
        duration = _clock((row.ended or time.monotonic()) - row.started)
        text = f"{mark} {row.tag:<24}"
        if row.status != "done":  # first: the reason must survive a narrow terminal
            why = [x for x in (row.detail, row.note) if x and x != row.status]
            if why:
                text += "  " + ": ".join(why)
        text += f"  rc={row.return_code}  {duration}"
        if row.window is not None:
            text += f"  {_window_text(row.window, row.units)}"
        elif row.rate is not None:
            text += f"  last {fmt_sig(row.rate)} {row.units}"
        if row.loss is not None:
            text += f"  loss {_loss_text(row.loss)}"
        if row.peak_rss is not None:
            text += f"  peak mem {fmt_bytes(row.peak_rss)}"
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
            m.warmup, m.window, m.peak_rss = row.warmup, row.window, row.peak_rss
            continue
        m.window = None  # one process's interval says nothing of the summed rate
        if row.warmup is None:  # the benchmark is in warm-up until every process is out
            m.warmup = None
        if row.peak_rss is not None:  # the benchmark's processes together
            m.peak_rss = (m.peak_rss or 0.0) + row.peak_rss
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
