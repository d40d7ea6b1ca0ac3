"""Reading run folders: one `FileResult` per `<tag>.data` file.

This is the only module of `milabench.report` that touches the run files; everything
downstream works on these small records, so a report can always be rebuilt from a folder
(and the store can keep the same records). Reading is tolerant: a cut last line is
skipped (`read_events`), unknown events are ignored, and a file without an `end` event
(the tool itself died) is kept and classified as incomplete rather than dropped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench.config.entry import Entry
from milabench.events import RC_SKIPPED, as_float, read_events
from milabench.report.outcome import ERROR_EVENTS

_REPEAT = re.compile(r"^R(\d+)$")
_DEVICE = re.compile(r"^D(\d+)$")
_JOB = re.compile(r"^\d+$")

SKIPPED = RC_SKIPPED
# `runs/install.<time>/` and `runs/prepare.<time>/` hold logs of those commands: only the
# `error` layer applies to them (no rates, not part of the score).
LOG_PHASES = ("install", "prepare")


@dataclass
class FileResult:
    """Everything the report needs from one process's `.data` file."""

    tag: str
    path: Path
    name: str
    config: dict = field(default_factory=dict)
    meta: dict | None = None
    rates: list[float] = field(default_factory=list)  # train_rate samples, in order
    rate_times: list[float | None] = field(default_factory=list)
    units: str | None = None
    other_rates: dict[str, list[float]] = field(default_factory=dict)  # <task>_rate
    losses: list[float] = field(default_factory=list)
    gpudata: list[tuple[float | None, dict]] = field(default_factory=list)
    cpudata: list[tuple[float | None, dict]] = field(default_factory=list)
    start_time: float | None = None
    end_time: float | None = None
    has_end: bool = False
    return_code: int | str | None = None
    early_stop: bool = False
    skip_reason: str | None = None
    errors: list[dict] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    # the start-up memory estimate per GPU, bytes (`benchkit.memory.record_estimate`)
    memory_estimate: float | None = None
    # which of upstream's inputs the benchmark used (`benchshared.inputs.announce`)
    inputs: dict | None = None
    # `message` events marked ``warning`` (a monitor that stopped, ...): shown, never fatal
    recorded_warnings: list[str] = field(default_factory=list)
    format_errors: int = 0
    n_data: int = 0
    stderr_lines: list[str] = field(default_factory=list)  # from `line` events
    repeat: int | None = None
    device: str | None = None  # "0" for D0
    job: str | None = None
    node: str | None = None
    phase: str = "run"  # "install" / "prepare" for the log folders of those commands
    # Measurement window (docs/measurement.md section 3): the last record of each kind.
    warmup: dict | None = None
    window: dict | None = None
    # What the instrumentation itself cost (`overhead` record of benchmarks measured from
    # outside through a voirfile, written once at the end): the last one, as written.
    overhead: dict | None = None
    # Golden checks (`benchkit.golden`: the timed operation against a float64 reference),
    # every `golden` payload in order: {"name", "dtype", "max_rel_error", "tolerance", ...}.
    golden: list[dict] = field(default_factory=list)
    # The work one item costs (`benchkit.flops`: flops_per_item, precision, flops_source),
    # the first declaration of the file; the report turns it into TFLOPS and MFU.
    flops: dict | None = None
    # Memory of the process tree (`process_tree` records of the runner, bytes), and the
    # benchmark's own `process` samples (RSS of the measuring process, bytes): fallback.
    tree_peak_rss: float | None = None
    process_rss: list[float] = field(default_factory=list)
    # What the rest of the host did meanwhile (`interference` records of the runner,
    # `milabench.execute.interference`), in order, and when the measured window began
    # (the `warmup` record's time) and ended (the `window` record's time).
    interference: list[tuple[float | None, dict]] = field(default_factory=list)
    measure_start: float | None = None
    window_end: float | None = None

    @property
    def skipped(self) -> bool:
        return self.skip_reason is not None

    @property
    def nan_loss(self) -> bool:
        """A NaN or infinite loss was recorded (both mean the training diverged)."""
        return any(not math.isfinite(x) for x in self.losses)

    @property
    def entry(self) -> Entry:
        """The `config` record as a typed entry (missing keys, as in older run folders,
        take the defaults): the report reads its fields, never the record's keys."""
        cached = self.__dict__.get("_entry")  # (record it was built from, entry)
        if cached is None or cached[0] is not self.config:
            record = self.config if isinstance(self.config, dict) else {}
            cached = self.__dict__["_entry"] = (self.config, Entry.from_mapping(record))
        return cached[1]

    @property
    def measure(self) -> dict:
        """The entry's resolved `measure` block (empty for older run folders)."""
        return dict(self.entry.measure or {})

    @property
    def peak_rss(self) -> float | None:
        """Largest resident memory seen: the process tree's, else the process's own."""
        if self.tree_peak_rss is not None:
            return self.tree_peak_rss
        return max(self.process_rss) if self.process_rss else None

    @property
    def group_key(self) -> str:
        """The tag without its node part: the files of one multi-node launch share it."""
        parts = [self.name]
        if self.repeat is not None:
            parts.append(f"R{self.repeat}")
        if self.device is not None:
            parts.append(f"D{self.device}")
        if self.job is not None:
            parts.append(self.job)
        return ".".join(parts)

    @property
    def stderr_path(self) -> Path:
        return self.path.with_suffix(".stderr")

    @property
    def stdout_path(self) -> Path:
        return self.path.with_suffix(".stdout")

    @property
    def duration(self) -> float | None:
        if self.start_time is None or self.end_time is None:
            return None
        return self.end_time - self.start_time


def split_tag(tag: str, name: str | None) -> tuple[str, dict[str, Any]]:
    """Benchmark name and the tag's parts (repeat, device, job, node).

    With the entry's name (from the `config` event) the prefix is exact even when the
    name contains dots; otherwise the known suffixes are peeled from the right.
    """
    if name and (tag == name or tag.startswith(name + ".")):
        rest = tag[len(name) + 1 :].split(".") if tag != name else []
    else:
        parts = tag.split(".")
        i = len(parts)
        while i > 1 and (
            _REPEAT.match(parts[i - 1])
            or _DEVICE.match(parts[i - 1])
            or _JOB.match(parts[i - 1])
            or (i == len(parts) and parts[i - 1].startswith("node"))
        ):
            i -= 1
        name, rest = ".".join(parts[:i]), parts[i:]
    info: dict[str, Any] = {"repeat": None, "device": None, "job": None, "node": None}
    for i, part in enumerate(rest):
        if info["job"] is not None:  # `<name>.0.<node>`: the node name may contain dots
            info["node"] = ".".join(rest[i:])
            break
        if m := _REPEAT.match(part):
            info["repeat"] = int(m.group(1))
        elif m := _DEVICE.match(part):
            info["device"] = m.group(1)
        elif _JOB.match(part):
            info["job"] = part
        else:
            info["node"] = ".".join(rest[i:])
            break
    return name, info


def _record(fr: FileResult, rec: dict) -> None:
    """Fold one metric record (docs/run-data.md section 3) into the file's result."""
    fr.n_data += 1
    t = as_float(rec.get("time"))
    task = rec.get("task")
    if "rate" in rec:
        value = as_float(rec["rate"])
        if value is not None:
            if task == "train":
                fr.rates.append(value)
                fr.rate_times.append(t)
                fr.units = rec.get("units") or fr.units
            else:
                fr.other_rates.setdefault(f"{task}_rate", []).append(value)
    if "loss" in rec:
        value = as_float(rec["loss"])
        if value is not None:
            fr.losses.append(value)
    if task == "early_stop" and isinstance(rec.get("progress"), list | tuple):
        prog = rec["progress"]
        if len(prog) == 2 and prog[1] and prog[0] is not None and prog[0] >= prog[1]:
            fr.early_stop = True
    if isinstance(rec.get("gpudata"), dict):
        fr.gpudata.append((t, rec["gpudata"]))
    if isinstance(rec.get("cpudata"), dict):
        fr.cpudata.append((t, rec["cpudata"]))
    if isinstance(rec.get("warmup"), dict):
        fr.warmup = rec["warmup"]
        fr.measure_start = t
    if isinstance(rec.get("window"), dict):
        fr.window = rec["window"]
        fr.window_end = t
    if isinstance(rec.get("interference"), dict):
        fr.interference.append((t, rec["interference"]))
    if isinstance(rec.get("overhead"), dict):
        fr.overhead = rec["overhead"]
    if task == "inputs" and isinstance(rec.get("inputs"), dict):
        fr.inputs = rec["inputs"]
    if isinstance(rec.get("golden"), dict):
        fr.golden.append(rec["golden"])
    if fr.flops is None and "flops_per_item" in rec:
        per_item = as_float(rec.get("flops_per_item"))
        if per_item is not None and math.isfinite(per_item) and per_item > 0:
            fr.flops = {
                "flops_per_item": per_item,
                "precision": str(rec.get("precision") or "fp32"),
                "flops_source": rec.get("flops_source"),
            }
            # what the device executed, recomputation under activation checkpointing
            # included (`benchkit.flops`): shown beside the model FLOPs, never instead
            hardware = as_float(rec.get("hardware_flops_per_item"))
            if hardware is not None and math.isfinite(hardware) and hardware > 0:
                fr.flops["hardware_flops_per_item"] = hardware
    tree = rec.get("process_tree")
    if isinstance(tree, dict):
        for key in ("peak_rss", "rss"):
            value = as_float(tree.get(key))
            if value is not None and math.isfinite(value) and value > 0:  # 0: no sample yet
                fr.tree_peak_rss = (
                    value if fr.tree_peak_rss is None else max(fr.tree_peak_rss, value)
                )
    proc = rec.get("process")
    if isinstance(proc, dict):
        mem = proc.get("memory")
        if isinstance(mem, list | tuple) and mem:
            value = as_float(mem[0])
            if value is not None and math.isfinite(value):
                fr.process_rss.append(value)


def read_file(path: Path) -> FileResult:
    """One `.data` file as a `FileResult`."""
    tag = path.name[: -len(".data")]
    fr = FileResult(tag=tag, path=path, name=tag)
    for ev in read_events(path):
        kind, data = ev.get("event"), ev.get("data")
        if kind == "data" and isinstance(data, dict):
            _record(fr, data)
        elif kind == "line":
            if ev.get("pipe") == "stderr" and isinstance(data, str):
                fr.stderr_lines.append(data.rstrip("\n"))
        elif kind == "config" and isinstance(data, dict):
            fr.config = data
        elif kind == "meta" and isinstance(data, dict):
            fr.meta = data
        elif kind == "start" and isinstance(data, dict):
            fr.start_time = as_float(data.get("time"))
        elif kind == "stop":
            fr.early_stop = True
        elif kind in ERROR_EVENTS:
            fr.errors.append(data if isinstance(data, dict) else {"message": str(data)})
        elif kind == "message":
            msg = data.get("message") if isinstance(data, dict) else data
            if msg is not None:
                fr.messages.append(str(msg))
                if isinstance(data, dict) and data.get("warning"):
                    fr.recorded_warnings.append(str(msg))
            if isinstance(data, dict) and data.get("estimate") is True:
                memory = data.get("memory")
                per_gpu = as_float(memory.get("per_gpu")) if isinstance(memory, dict) else None
                if per_gpu is not None and math.isfinite(per_gpu) and per_gpu > 0:
                    fr.memory_estimate = per_gpu
            if isinstance(data, dict) and data.get("skipped"):
                kind_ = data["skipped"] if isinstance(data["skipped"], str) else "capability"
                note = str(msg).removeprefix("skipped: ") if msg else ""
                fr.skip_reason = f"skipped: {kind_}" + (f" ({note})" if note else "")
        elif kind == "format_error":
            fr.format_errors += 1
        elif kind == "end" and isinstance(data, dict):
            fr.has_end = True
            fr.end_time = as_float(data.get("time"))
            fr.return_code = data.get("return_code")
            if data.get("early_stop") is True:  # stopped by the runner after its budget
                fr.early_stop = True
    if fr.return_code == SKIPPED and fr.skip_reason is None:
        note = fr.messages[-1].removeprefix("skipped: ") if fr.messages else None
        fr.skip_reason = "skipped: capability" + (f" ({note})" if note else "")
    name, info = split_tag(tag, fr.entry.name or None)
    fr.name = name
    fr.repeat, fr.device, fr.job, fr.node = (
        info["repeat"],
        info["device"],
        info["job"],
        info["node"],
    )
    return fr


def read_run_dir(run_dir: Path) -> list[FileResult]:
    """Every `.data` file of a run folder, sorted by tag (missing folder: user error)."""
    from milabench.errors import UsageError

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such run folder")
    phase = run_dir.name.split(".", 1)[0]
    files = [read_file(p) for p in sorted(run_dir.glob("*.data"))]
    if phase in LOG_PHASES:
        for fr in files:
            fr.phase = phase
    return files
