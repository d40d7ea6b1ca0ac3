"""The run-data format, decoded once: every event and metric record, as typed values.

A `.data` file (docs/run-data.md) is a stream of events; a ``data`` event carries one
metric record that a benchmark wrote. `Decoder.event` is the one place that knows every
event name and record kind (and, through `milabench.events.read_events`, every format
version: the records read the same in versions 1 and 2): it turns one event into a
tuple of the typed values below, a record with several kinds in it (a rate and a loss)
giving one value per kind, in a fixed order. The report's reader
(`milabench.rundata.reader`) and the live dashboard (`milabench.sinks.dashboard`) fold
these values into their own state, so they cannot read a record differently.

Values that do not parse (a rate that is not a number, a ``gpudata`` that is not an
object) give nothing. An event name or a record kind the decoder does not know is
ignored and counted in `Decoder.unknown` (by name, ``data:<keys>`` for records): that
is today's visible behaviour, and the only place that decides it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milabench.events import RC_SKIPPED, as_float, read_events

# Events that count as errors of a process: the tool's and benchkit's `error`, and voir's
# `overseer_error` (an instrument that broke, e.g. a probe selector naming a variable that
# does not exist: voir carries on, so without it a run would pass having measured nothing).
ERROR_EVENTS = ("error", "overseer_error")

# The keys that name a metric record's kind (docs/run-data.md section 3); a record with
# none of them is an unknown kind.
RECORD_KEYS = (
    "rate",
    "loss",
    "progress",
    "gpudata",
    "cpudata",
    "process",
    "process_tree",
    "warmup",
    "window",
    "interference",
    "overhead",
    "inputs",
    "golden",
    "flops_per_item",
    "torch_memory",
)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


# -- metric records (`data` events) --------------------------------------------------------
@dataclass(slots=True)
class Rate:
    """A throughput sample; ``task == "train"`` is the one scored (``train_rate``)."""

    task: Any
    value: float
    units: str | None
    time: float | None


@dataclass(slots=True)
class Loss:
    """A loss value (NaN and infinities included: a diverged training)."""

    value: float
    time: float | None


@dataclass(slots=True)
class Progress:
    """``[done, total]`` of ``task``; for ``early_stop`` the measurement budget."""

    task: Any
    done: float | None
    total: float | None
    time: float | None

    @property
    def stops(self) -> bool:
        """The early-stop rule: the ``early_stop`` progress reached its total (the
        instrumentation's budget is spent, so the end that follows is a stop)."""
        return (
            self.task == "early_stop"
            and self.total is not None
            and self.total != 0
            and self.done is not None
            and self.done >= self.total
        )


@dataclass(slots=True)
class Sample:
    """A record holding one object: ``kind`` is its key (``gpudata``, ``cpudata``,
    ``warmup``, ``window``, ``interference``, ``overhead``, ``golden``, ``inputs``)."""

    kind: str
    data: dict
    time: float | None


@dataclass(slots=True)
class Flops:
    """The work one item costs (`benchkit.flops`), checked: a finite positive count."""

    flops_per_item: float
    precision: str
    flops_source: Any
    hardware_flops_per_item: float | None  # with recomputation; None when not declared

    def as_dict(self) -> dict[str, Any]:
        out = {
            "flops_per_item": self.flops_per_item,
            "precision": self.precision,
            "flops_source": self.flops_source,
        }
        if self.hardware_flops_per_item is not None:
            out["hardware_flops_per_item"] = self.hardware_flops_per_item
        return out


@dataclass(slots=True)
class ProcessTree:
    """The runner's memory record of the process tree (bytes, as written)."""

    rss: float | None
    peak_rss: float | None
    time: float | None

    @property
    def peak(self) -> float | None:
        """The largest finite, positive value of the record (0 means no sample yet)."""
        values = [v for v in (self.peak_rss, self.rss) if _finite(v) and v > 0]
        return max(values) if values else None


@dataclass(slots=True)
class ProcessMemory:
    """The measuring process's own resident memory (benchkit's ``process`` monitor)."""

    rss: float
    time: float | None


@dataclass(slots=True)
class TorchMemory:
    """torch's peak memory on one process's device (`benchkit.devicemem`), MiB; the
    counters are None where the record lacks them."""

    max_allocated: float | None
    max_reserved: float | None
    alloc_retries: int | None
    ooms: int | None
    device: Any
    rank: Any
    time: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_allocated": self.max_allocated,
            "max_reserved": self.max_reserved,
            "alloc_retries": self.alloc_retries,
            "ooms": self.ooms,
            "device": self.device,
            "rank": self.rank,
        }


# -- events --------------------------------------------------------------------------------
@dataclass(slots=True)
class Config:
    data: dict


@dataclass(slots=True)
class Meta:
    data: dict


@dataclass(slots=True)
class Start:
    time: float | None
    command: tuple


@dataclass(slots=True)
class Line:
    pipe: Any
    text: str


@dataclass(slots=True)
class Stop:
    """The instrumentation asked for the stop (its window is over)."""

    reason: Any


@dataclass(slots=True)
class Error:
    """An `ERROR_EVENTS` event; ``data`` is its payload as an object."""

    kind: str
    data: dict


@dataclass(slots=True)
class Message:
    """A ``message`` with its markers: ``warning`` (shown, never fatal), ``skipped`` (the
    kind of a skip), ``estimate_per_gpu`` (the start-up memory estimate, bytes)."""

    text: str | None
    warning: bool
    skipped: Any
    estimate_per_gpu: float | None
    is_object: bool  # written as an object (what the live view shows)


@dataclass(slots=True)
class Phase:
    name: str


@dataclass(slots=True)
class FormatError:
    data: Any


@dataclass(slots=True)
class End:
    """The process is over (always the last event of a finished process)."""

    time: float | None
    return_code: Any
    early_stop: bool  # the runner ended the process after the instrumentation's stop
    is_object: bool = True  # False: a payload that is not an object (nothing but the end)

    @property
    def skipped(self) -> bool:
        return self.return_code == RC_SKIPPED


Record = Rate | Loss | Progress | Sample | Flops | ProcessTree | ProcessMemory | TorchMemory
Item = Record | Config | Meta | Start | Line | Stop | Error | Message | Phase | FormatError | End

_RATE_KEYS = frozenset(("task", "rate", "units", "time"))
_SAMPLE_KINDS = ("gpudata", "cpudata", "warmup", "window", "interference", "overhead")


class Decoder:
    """Events and metric records -> typed values; unknown kinds counted in `unknown`."""

    def __init__(self) -> None:
        self.unknown: Counter[str] = Counter()

    def _unknown(self, kind: str) -> tuple:
        """THE handling of a kind this decoder does not know: ignored, and counted."""
        self.unknown[kind] += 1
        return ()

    def event(self, event: dict) -> tuple[Item, ...]:
        """One event (``{"event", "data", "pipe"}``) as typed values (maybe none)."""
        kind, data = event.get("event"), event.get("data")
        if kind == "data":
            return self.record(data) if isinstance(data, dict) else ()
        if kind == "line":
            return (Line(event.get("pipe"), data),) if isinstance(data, str) else ()
        if kind == "config":
            return (Config(data),) if isinstance(data, dict) else ()
        if kind == "meta":
            return (Meta(data),) if isinstance(data, dict) else ()
        if kind == "start":
            if not isinstance(data, dict):
                return (Start(None, ()),)
            command = data.get("command")
            command = tuple(command) if isinstance(command, list | tuple) else ()
            return (Start(as_float(data.get("time")), command),)
        if kind == "stop":
            return (Stop(data.get("reason") if isinstance(data, dict) else None),)
        if kind in ERROR_EVENTS:
            return (Error(kind, data if isinstance(data, dict) else {"message": str(data)}),)
        if kind == "message":
            return (_message(data),)
        if kind == "phase":
            return (Phase(str(data.get("name", ""))),) if isinstance(data, dict) else ()
        if kind == "format_error":
            return (FormatError(data),)
        if kind == "end":
            if not isinstance(data, dict):
                return (End(None, None, False, is_object=False),)
            time, code = as_float(data.get("time")), data.get("return_code")
            return (End(time, code, data.get("early_stop") is True),)
        return self._unknown(str(kind))

    def record(self, rec: dict) -> tuple[Record, ...]:
        """One metric record (docs/run-data.md section 3), one value per kind in it."""
        if "rate" in rec and rec.keys() <= _RATE_KEYS:  # the hot path: a plain rate record
            rate = _rate(rec)
            return (rate,) if rate is not None else ()
        if not any(key in rec for key in RECORD_KEYS):
            return self._unknown("data:" + ",".join(sorted(k for k in rec if k != "time")))
        return tuple(_record(rec))

    def events(self, path: str | Path) -> Iterator[tuple[dict, tuple[Item, ...]]]:
        """Every event of a `.data` file with its typed values (`read_events`: a cut last
        line skipped, a newer format version refused in one line)."""
        for ev in read_events(path):
            yield ev, self.event(ev)


def _rate(rec: dict) -> Rate | None:
    value = as_float(rec["rate"])
    if value is None:
        return None
    units = rec.get("units")
    units = None if units is None else str(units)
    return Rate(rec.get("task"), value, units, as_float(rec.get("time")))


def _message(data: Any) -> Message:
    if not isinstance(data, dict):
        return Message(None if data is None else str(data), False, None, None, False)
    text = data.get("message")
    per_gpu = None
    if data.get("estimate") is True:
        memory = data.get("memory")
        value = as_float(memory.get("per_gpu")) if isinstance(memory, dict) else None
        if _finite(value) and value > 0:
            per_gpu = value
    return Message(
        None if text is None else str(text),
        bool(data.get("warning")),
        data.get("skipped") or None,
        per_gpu,
        True,
    )


def _record(rec: dict) -> Iterator[Record]:
    t = as_float(rec.get("time"))
    task = rec.get("task")
    if "rate" in rec:
        rate = _rate(rec)
        if rate is not None:
            yield rate
    if "loss" in rec:
        value = as_float(rec["loss"])
        if value is not None:
            yield Loss(value, t)
    prog = rec.get("progress")
    if isinstance(prog, list | tuple) and len(prog) == 2:
        yield Progress(task, as_float(prog[0]), as_float(prog[1]), t)
    for kind in _SAMPLE_KINDS:
        if isinstance(rec.get(kind), dict):
            yield Sample(kind, rec[kind], t)
    if task == "inputs" and isinstance(rec.get("inputs"), dict):
        yield Sample("inputs", rec["inputs"], t)
    if isinstance(rec.get("golden"), dict):
        yield Sample("golden", rec["golden"], t)
    if "flops_per_item" in rec:
        per_item = as_float(rec.get("flops_per_item"))
        if _finite(per_item) and per_item > 0:
            hardware = as_float(rec.get("hardware_flops_per_item"))
            yield Flops(
                per_item,
                str(rec.get("precision") or "fp32"),
                rec.get("flops_source"),
                hardware if _finite(hardware) and hardware > 0 else None,
            )
    memory = rec.get("torch_memory")
    if isinstance(memory, dict):
        found = _torch_memory(memory, t)
        if found is not None:
            yield found
    tree = rec.get("process_tree")
    if isinstance(tree, dict):
        yield ProcessTree(as_float(tree.get("rss")), as_float(tree.get("peak_rss")), t)
    proc = rec.get("process")
    if isinstance(proc, dict):
        mem = proc.get("memory")
        if isinstance(mem, list | tuple) and mem:
            value = as_float(mem[0])
            if _finite(value):
                yield ProcessMemory(value, t)


def _torch_memory(data: dict, t: float | None) -> TorchMemory | None:
    """A ``torch_memory`` record's figures, checked: finite non-negative MiB, whole
    non-negative counts; None when neither peak is a number."""

    def mib(key: str) -> float | None:
        value = as_float(data.get(key))
        return value if _finite(value) and value >= 0 else None

    def count(key: str) -> int | None:
        value = data.get(key)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return value if ok else None

    allocated, reserved = mib("max_allocated"), mib("max_reserved")
    if allocated is None and reserved is None:
        return None
    return TorchMemory(
        allocated, reserved, count("alloc_retries"), count("ooms"),
        data.get("device"), data.get("rank"), t,
    )  # fmt: skip


__all__ = [
    "ERROR_EVENTS",
    "RECORD_KEYS",
    "Config",
    "Decoder",
    "End",
    "Error",
    "Flops",
    "FormatError",
    "Item",
    "Line",
    "Loss",
    "Message",
    "Meta",
    "Phase",
    "Progress",
    "ProcessMemory",
    "ProcessTree",
    "Rate",
    "Record",
    "Sample",
    "Start",
    "Stop",
    "TorchMemory",
]
