"""Reading run folders: one `FileResult` per `<tag>.data` file.

The only reader of run files: the report, the results store, the fleet report and
``run --resume`` work on these small records, so a report can always be rebuilt from a
folder (and the store can keep the same records). Every event goes through the one
decoder (`milabench.rundata.records.Decoder`); this module only folds the typed values
into a `FileResult`. Reading is tolerant: a cut last line is skipped (`read_events`),
unknown events and record kinds are ignored (counted in `FileResult.unknown`), and a
file without an `end` event (the tool itself died) is kept and classified as incomplete
rather than dropped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench.config.entry import Entry
from milabench.events import RC_SKIPPED
from milabench.rundata import records as rec

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
    # torch's peak memory of each process's device, MiB (`benchkit.devicemem`), in order:
    # {"max_allocated", "max_reserved", "alloc_retries", "ooms", "device", "rank"}
    torch_memory: list[dict] = field(default_factory=list)
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
    # Events and record kinds the decoder does not know, by kind (ignored otherwise).
    unknown: dict[str, int] = field(default_factory=dict)

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


def _fold(fr: FileResult, item: rec.Item) -> None:
    """Fold one decoded value (`milabench.rundata.records`) into the file's result."""
    match item:
        case rec.Rate(task=task, value=value, units=units, time=t):
            if task == "train":
                fr.rates.append(value)
                fr.rate_times.append(t)
                fr.units = units or fr.units
            else:
                fr.other_rates.setdefault(f"{task}_rate", []).append(value)
        case rec.Loss(value=value):
            fr.losses.append(value)
        case rec.Progress():
            if item.stops:
                fr.early_stop = True
        case rec.Sample(kind=kind, data=data, time=t):
            _fold_sample(fr, kind, data, t)
        case rec.Flops():
            if fr.flops is None:  # the first declaration of the file
                fr.flops = item.as_dict()
        case rec.TorchMemory():
            fr.torch_memory.append(item.as_dict())
        case rec.ProcessTree():
            peak = item.peak
            if peak is not None:
                fr.tree_peak_rss = peak if fr.tree_peak_rss is None else max(fr.tree_peak_rss, peak)
        case rec.ProcessMemory(rss=rss):
            fr.process_rss.append(rss)
        case rec.Line(pipe=pipe, text=text):
            if pipe == "stderr":
                fr.stderr_lines.append(text.rstrip("\n"))
        case rec.Config(data=data):
            fr.config = data
        case rec.Meta(data=data):
            fr.meta = data
        case rec.Start(time=t):
            fr.start_time = t
        case rec.Stop():
            fr.early_stop = True
        case rec.Error(data=data):
            fr.errors.append(data)
        case rec.Message():
            _fold_message(fr, item)
        case rec.FormatError():
            fr.format_errors += 1
        case rec.End():
            if item.is_object:
                fr.has_end = True
                fr.end_time = item.time
                fr.return_code = item.return_code
                if item.early_stop:  # stopped by the runner after its budget
                    fr.early_stop = True


def _fold_sample(fr: FileResult, kind: str, data: dict, t: float | None) -> None:
    if kind == "gpudata":
        fr.gpudata.append((t, data))
    elif kind == "cpudata":
        fr.cpudata.append((t, data))
    elif kind == "warmup":
        fr.warmup = data
        fr.measure_start = t
    elif kind == "window":
        fr.window = data
        fr.window_end = t
    elif kind == "interference":
        fr.interference.append((t, data))
    elif kind == "overhead":
        fr.overhead = data
    elif kind == "inputs":
        fr.inputs = data
    elif kind == "golden":
        fr.golden.append(data)


def _fold_message(fr: FileResult, msg: rec.Message) -> None:
    if msg.text is not None:
        fr.messages.append(msg.text)
        if msg.warning:
            fr.recorded_warnings.append(msg.text)
    if msg.estimate_per_gpu is not None:
        fr.memory_estimate = msg.estimate_per_gpu
    if msg.skipped:
        kind = msg.skipped if isinstance(msg.skipped, str) else "capability"
        note = msg.text.removeprefix("skipped: ") if msg.text else ""
        fr.skip_reason = f"skipped: {kind}" + (f" ({note})" if note else "")


def read_file(path: Path) -> FileResult:
    """One `.data` file as a `FileResult`."""
    tag = path.name[: -len(".data")]
    fr = FileResult(tag=tag, path=path, name=tag)
    decoder = rec.Decoder()
    for ev, items in decoder.events(path):
        if ev.get("event") == "data":
            fr.n_data += isinstance(ev.get("data"), dict)
        for item in items:
            _fold(fr, item)
    fr.unknown = dict(decoder.unknown)
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
