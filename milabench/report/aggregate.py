"""From `FileResult`s to per-benchmark statistics, benchmark scores and the suite score.

Whether a file succeeded is `milabench.rundata.outcome`'s one rule (`file_status` and
`failure_detail`, also importable from here). The rate samples of a benchmark's
successful files are pooled and trimmed (`stats.trim`), then summarised; the benchmark
score is its rate (per_gpu: the sum over devices) times ``1 - fail / n``. Every
benchmark says how good its number is (observations, times, the 95% interval of its
rate, the precision target, the instrumentation's cost above `OVERHEAD_WARN`), with a
warning for each shortfall. The suite score is the weighted geometric mean of
``score + 1``; an enabled, weighted benchmark without a result counts as 0 and carries
the reason, and a suite in which no weighted benchmark measured has no score (None, and
the reason). The rules and formulas: docs/reports.md section 1.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benchkit.window import Interval, rate_interval, t975
from milabench.config.entry import Entry, as_entry
from milabench.report import stats
from milabench.report.efficiency import PeakTable, counter_energy, efficiency
from milabench.report.interference import apply_interference
from milabench.rundata import outcome
from milabench.rundata.numbers import MISSING, fmt_duration, fmt_seconds, fmt_sig
from milabench.rundata.outcome import failure_detail, file_status, measure_setting
from milabench.rundata.reader import FileResult

SUCCESS = outcome.SUCCESS

DEFAULT_PRECISION = 0.02
DEFAULT_MIN_OBSERVATIONS = 10
# Instrumentation that costs more than 1% of a step is a warning: the benchmarks' own
# noise floor is about that (precision target +/-2%, run-to-run drift 1-4%), and an
# instrument that costs more than it moves the figure it reports (docs/reports.md).
OVERHEAD_WARN = 0.01


def _setting(fr: FileResult, key: str, default: float) -> float:
    """A number of the file's `measure` block ("2%" accepted), else the default."""
    return measure_setting(fr.measure, key, default)


@dataclass
class FileWindow:
    """How well one file measured: from its `window`/`warmup` records, else recomputed."""

    observations: int
    warmup_s: float | None
    measured_s: float | None
    interval: Interval | None  # recomputed from the file's rates (time order)
    halfwidth: float | None  # relative; the window record's when there is one
    target: float
    min_observations: int
    met: bool
    settled: bool | None
    reason: str | None


def _num_or_none(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def file_window(fr: FileResult) -> FileWindow:
    """The measurement window of one file (docs/measurement.md sections 2-3).

    The interval is always recomputed from the rates with the benchmark's own code, so
    files without a `window` record (older runs, third-party scripts, a process killed
    before its window ended) are judged the same way; a `window` record, when present,
    gives the times, the target and whether the benchmark itself found it met.
    """
    win = fr.window or {}
    warm = fr.warmup or {}
    interval = rate_interval(fr.rates)
    target = _num_or_none(win.get("target"))
    if target is None:
        target = _setting(fr, "precision", DEFAULT_PRECISION)
    min_obs = win.get("min_observations")
    if not isinstance(min_obs, int) or isinstance(min_obs, bool):
        min_obs = int(_setting(fr, "min_observations", DEFAULT_MIN_OBSERVATIONS))
    halfwidth = _num_or_none(win.get("halfwidth")) if fr.window else None
    if halfwidth is None and interval is not None and math.isfinite(interval.halfwidth):
        halfwidth = interval.halfwidth
    n = len(fr.rates)
    if fr.window and isinstance(win.get("met"), bool):
        met = win["met"]
    else:
        met = halfwidth is not None and halfwidth <= target and n >= min_obs
    warmup_s = _num_or_none(win.get("warmup_s"))
    if warmup_s is None:
        warmup_s = _num_or_none(warm.get("seconds"))
    measured_s = _num_or_none(win.get("measured_s"))
    if measured_s is None:
        # n timed records span n - 1 steps between the first and the last: scale up.
        times = [t for t in fr.rate_times if t is not None]
        if len(times) >= 2 and times[-1] > times[0]:
            measured_s = (times[-1] - times[0]) * len(times) / (len(times) - 1)
    settled = win.get("settled", warm.get("settled"))
    reason = win.get("reason")
    return FileWindow(
        observations=n,
        warmup_s=warmup_s,
        measured_s=measured_s,
        interval=interval,
        halfwidth=halfwidth,
        target=target,
        min_observations=min_obs,
        met=bool(met),
        settled=settled if isinstance(settled, bool) else None,
        reason=reason if isinstance(reason, str) else None,
    )


def _short_pct(fraction: float) -> str:
    """A relative half-width as a short percentage: 0.041 -> "4.1%", 0.02 -> "2%"."""
    text = fmt_sig(100.0 * fraction, 2)
    if "." in text and "e" not in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text}%"


def window_warnings(w: FileWindow, fr: FileResult | None = None) -> list[str]:
    """Human sentences for every way a window fell short (warnings never fail a run);
    ``fr``, the file, lets the loop-ran-out sentence say what the window wanted."""
    out: list[str] = []
    n = w.observations
    ran_out = w.reason in ("ended", "ended_in_warmup")
    if n < w.min_observations:
        msg = f"{n} observations, fewer than the {w.min_observations} wanted"
        if not ran_out and n and w.measured_s:
            msg += (
                f": the step ({fmt_seconds(w.measured_s / n)}) is long for the "
                f"{fmt_seconds(w.measured_s)} window"
            )
        out.append(msg)
    if w.halfwidth is not None and w.halfwidth > w.target:
        out.append(f"95% interval ±{_short_pct(w.halfwidth)}, target ±{_short_pct(w.target)}")
    elif w.halfwidth is None and n and n >= w.min_observations:
        out.append(f"95% interval unknown, target ±{_short_pct(w.target)}")
    if w.reason == "ended_in_warmup":
        out.append(ended_in_warmup_warning(w.warmup_s))
    elif w.settled is False:
        cap = f" (capped at {fmt_seconds(w.warmup_s)})" if w.warmup_s is not None else ""
        out.append(f"warm-up never settled{cap}: the step time was still moving")
    if w.reason == "ended":
        measured = f" after {fmt_seconds(w.measured_s)}" if w.measured_s is not None else ""
        msg = f"the loop ran out{measured}, before the window's end"
        if fr is not None:
            settings = measure_settings(fr)
            msg += (
                f" ({_span(settings.min, settings.max)} of measured steps wanted): give the "
                "script more steps through its argv"
            )
        out.append(msg)
    return out


def ended_in_warmup_warning(warmup_s: float | None) -> str:
    """The script ended while still warming up: the measured window never began."""
    warm = f" after {fmt_seconds(warmup_s)}" if warmup_s is not None else ""
    return (
        f"the loop ended during warm-up{warm}, before the measured window could begin: "
        "nothing measured"
    )


def measure_settings(fr: FileResult):
    """The file's `measure` block as the benchmark read it (`benchkit.options`), the
    defaults when it cannot be read."""
    from benchkit.options import MeasureSettings, parse_measure

    try:
        return parse_measure(fr.measure or None)
    except ValueError:
        return MeasureSettings()


def _span(low: float, high: float) -> str:
    """``1.00 s to 10.0 s``; ``at least 6.00 s`` without an upper bound."""
    if high and high > low:
        return f"{fmt_seconds(low)} to {fmt_seconds(high)}"
    return f"at least {fmt_seconds(low)}" if low else "any time"


def _below(seconds: float) -> str:
    """A round number of seconds below `seconds` (one significant digit of half of it),
    for an ``--override`` that a person pastes: 1.01 -> ``0.5s``, 0.13 -> ``0.06s``."""
    half = max(seconds / 2, 0.001)
    digits = -math.floor(math.log10(half))
    value = math.floor(half * 10**digits) / 10**digits
    return f"{value:g}s"


def short_run_sentence(fr: FileResult, what: str, ran_s: float | None) -> str:
    """One line for a process that ended before its window measured anything: ``what``
    happened, how long the process ran, what a measurement needs (the file's `measure`
    block) and what to change: more steps through the script's argv, or a warm-up short
    enough to end before the loop does (as ``--override`` options to paste)."""
    settings = measure_settings(fr)
    ran = ""
    if fr.start_time is not None and fr.end_time is not None and fr.end_time >= fr.start_time:
        ran = f" (the process ran {fmt_seconds(fr.end_time - fr.start_time)})"
    needs = (
        f"a measurement needs {_span(settings.warmup_min, settings.warmup_max)} of warm-up "
        f"(measure.warmup_min, warmup_max; the shorter once the step time settles), then "
        f"{_span(settings.min, settings.max)} of measured steps (measure.min, max)"
    )
    change = "give the script more steps through its argv"
    if ran_s is not None and ran_s > 0:
        change += (
            f", or end the warm-up before {fmt_seconds(ran_s)}: --override "
            f"{fr.name}.measure.warmup_min=0s --override {fr.name}.measure.warmup_max="
            f"{_below(ran_s)}"
        )
    return f"nothing measured: {what}{ran}; {needs}: {change}"


def unmeasured_warnings(fr: FileResult) -> list[str]:
    """Why a process that wrote no rate measured nothing, when its records tell: one line
    (`short_run_sentence`) saying how long it ran, what a measurement needs and what to
    change.

    A `window` record with reason ``ended_in_warmup``: the loop ran out during warm-up.
    A `window` record of another reason with no observation: the loop ended (``ended``)
    or the window's time ran out (``max_time``) before a measured step completed.
    A `warmup` record (written when measurement begins) but no `window` record: the
    process ended right after its warm-up, before the window recorded a single step.
    Such a process also fails (no throughput sample); the warning says why.
    """
    if fr.rates:
        return []  # `window_warnings` covers a file that measured
    win, warm = fr.window or {}, fr.warmup or {}
    warmup_s = _num_or_none(win.get("warmup_s"))
    if warmup_s is None:
        warmup_s = _num_or_none(warm.get("seconds"))
    measured_s = _num_or_none(win.get("measured_s"))
    after = f" after {fmt_seconds(warmup_s)}" if warmup_s is not None else ""
    if fr.window is not None and win.get("reason") == "ended_in_warmup":
        what = f"the loop ended during warm-up{after}, before the measured window could begin"
        return [short_run_sentence(fr, what, warmup_s)]
    if fr.window is not None and win.get("reason") == "max_time":
        settings = measure_settings(fr)
        window = fmt_seconds(measured_s if measured_s is not None else settings.max)
        raised = f"{max(2 * (measured_s or settings.max), 1):g}s"
        return [
            f"nothing measured: no measured step completed in the {window} window (after "
            f"{fmt_seconds(warmup_s or 0.0)} of warm-up): a step is longer than the window; "
            f"--override {fr.name}.measure.max={raised} gives it time"
        ]
    if fr.window is not None:
        into = f" {fmt_seconds(measured_s)}" if measured_s is not None else ""
        reason = win.get("reason")
        why = "the loop ended" if reason in (None, "ended") else f"the window ended ({reason})"
        warmed = f", after {fmt_seconds(warmup_s)} of warm-up" if warmup_s is not None else ""
        what = f"{why}{into} into the measured window, before a measured step completed{warmed}"
        total = (warmup_s or 0.0) + (measured_s or 0.0)
        return [short_run_sentence(fr, what, total or None)]
    if fr.warmup is not None:
        what = (
            f"the script ended as its warm-up finished{after}, before the measured window "
            "could record a step"
        )
        return [short_run_sentence(fr, what, warmup_s)]
    return []


@dataclass
class Overhead:
    """What the instrumentation cost one process (its `overhead` record, docs/reports.md)."""

    fraction: float  # of a step: per_step_s / step_s
    per_step_s: float | None  # instrumentation seconds per measured step
    step_s: float | None  # seconds of a measured step


def file_overhead(fr: FileResult) -> Overhead | None:
    """The file's `overhead` record, read tolerantly (None when it says nothing usable).

    `fraction` is taken as written; without it, `per_step_s / step_s`. Any key may be
    missing, null or not a number.
    """
    rec = fr.overhead
    if not isinstance(rec, dict):
        return None
    per_step = _num_or_none(rec.get("per_step_s"))
    step = _num_or_none(rec.get("step_s"))
    if step is not None and step <= 0:
        step = None
    fraction = _num_or_none(rec.get("fraction"))
    if fraction is None and per_step is not None and step is not None:
        fraction = per_step / step
    if fraction is None:
        return None
    if per_step is None and step is not None:
        per_step = fraction * step
    return Overhead(fraction=fraction, per_step_s=per_step, step_s=step)


def fmt_overhead(fraction: float | None) -> str:
    """The overhead as the tables print it: 0.0002 -> "0.02%/step" ("-" when unknown)."""
    return MISSING if fraction is None else f"{_short_pct(fraction)}/step"


def overhead_warning(found: Overhead) -> str | None:
    """A sentence when the instrumentation costs more than `OVERHEAD_WARN` of a step."""
    if found.fraction <= OVERHEAD_WARN:
        return None
    if found.per_step_s is not None and found.step_s is not None:
        detail = f" ({fmt_duration(found.per_step_s)} of {fmt_duration(found.step_s)})"
    elif found.per_step_s is not None:
        detail = f" ({fmt_duration(found.per_step_s)} per step)"
    else:
        detail = ""
    return (
        f"instrumentation costs {_short_pct(found.fraction)} of a step{detail}: "
        f"above {_short_pct(OVERHEAD_WARN)}"
    )


@dataclass
class BenchResult:
    """One row of the Breakdown table, plus what the plots and validations need."""

    name: str
    weight: float = 0.0
    enabled: bool = True
    group: str | None = None
    plan_method: str | None = None
    files: list[FileResult] = field(default_factory=list)
    statuses: dict[str, str] = field(default_factory=dict)  # tag -> status
    n: int = 0
    fail: int = 0
    ngpu: int = 0
    units: str | None = None
    samples: list[float] = field(default_factory=list)  # trimmed pooled rates
    summary: stats.Summary | None = None
    device_rates: dict[str, float] = field(default_factory=dict)
    raw_rate: float = math.nan  # before the failure penalty
    score: float = 0.0
    peak_memory: float | None = None
    memory_estimate: float | None = None  # MiB per GPU, estimated at start (the largest)
    # torch's own peaks on the processes' devices (`benchkit.devicemem`), MiB, and the
    # allocator's retries and caught out-of-memory errors: the largest over the processes
    torch_peak_allocated: float | None = None
    torch_peak_reserved: float | None = None
    torch_alloc_retries: int | None = None
    torch_ooms: int | None = None
    mean_load: float | None = None
    energy: float | None = None  # joules
    energy_source: str | None = None  # "counter" (the devices' energy counters) or "power"
    mean_power: float | None = None  # watts
    perf_per_watt: float | None = None  # items/s per watt = items per joule
    # Efficiency (`milabench.report.efficiency`): filled by `apply_efficiency`.
    flops_per_item: float | None = None
    flops_precision: str | None = None
    flops_source: str | None = None
    tflops: float | None = None
    tflops_low: float | None = None  # the rate's 95% interval, in TFLOPS
    tflops_high: float | None = None
    product: str | None = None
    peak_tflops: float | None = None  # the devices' peak for the precision, together
    mfu: float | None = None  # model FLOPs utilisation, 0..1
    # recomputation included (activation checkpointing), when declared: beside the MFU
    hardware_flops_per_item: float | None = None
    hardware_tflops: float | None = None
    hfu: float | None = None  # hardware FLOPs utilisation, 0..1
    reason: str | None = None
    # the suite entry's `parity` ("same" / "different: <why>", docs/parity.md), or None
    parity: str | None = None
    # the `--batch-size` of its argv, when it has one (held against upstream's figures)
    batch_size: int | None = None
    # the `inputs` record of its rank 0 (docs/inputs.md): upstream's inputs or a stand-in
    inputs: dict | None = None
    phase: str = "run"
    # How good the number is (docs/measurement.md): over the successful files.
    observations: int = 0
    warmup_s: float | None = None  # the longest warm-up of the benchmark's processes
    measured_s: float | None = None  # the longest measured window
    ci_low: float | None = None  # 95% interval of `raw_rate` (the benchmark's rate)
    ci_high: float | None = None
    halfwidth: float | None = None  # relative to `raw_rate`
    target: float | None = None
    target_met: bool | None = None
    min_observations: int | None = None  # the observations wanted per process
    warnings: list[str] = field(default_factory=list)
    peak_rss: float | None = None  # bytes
    # Instrumentation cost (voirfile benchmarks only; None for built-in ones): the largest
    # fraction of a step over the successful files, and that file's seconds per step.
    overhead: float | None = None
    overhead_per_step_s: float | None = None
    # What the rest of the machine did during the measured window (other processes,
    # steal, CPU pressure, GPU slowdowns, XIDs: `milabench.report.interference`)
    interference: dict | None = None
    interference_text: str | None = None  # the column: "others 45%", "none"
    target_unreachable: bool = False  # a window ended early: the target could not be met

    @property
    def perf(self) -> float:
        return self.summary.mean if self.summary else math.nan

    @property
    def effective_weight(self) -> float:
        return float(self.weight) * (1.0 if self.enabled else 0.0)


def apply_entry(br: BenchResult, entry: Entry | Mapping[str, Any]) -> None:
    """Weight, group and plan method of the suite entry (or of a run's `config` record)."""
    entry = as_entry(entry)
    br.weight = entry.weight
    br.enabled = entry.enabled
    br.group = entry.group or br.group
    br.plan_method = entry.plan.method
    br.parity = entry.parity
    br.batch_size = batch_size_of(entry.argv)


def batch_size_of(argv: Any) -> int | None:
    """The ``--batch-size`` of an entry's argv (a list or a mapping); None without one, or
    when it is not a whole number (an unresolved placeholder)."""
    if isinstance(argv, Mapping):
        value = argv.get("--batch-size")
    elif isinstance(argv, list):
        items = [str(a) for a in argv]
        at = items.index("--batch-size") if "--batch-size" in items else -1
        value = items[at + 1] if 0 <= at < len(items) - 1 else None
    else:
        value = None
    try:
        return int(str(value)) if value is not None and not isinstance(value, bool) else None
    except ValueError:
        return None


def _accelerator_stats(br: BenchResult, files: list[FileResult], per_gpu: bool) -> None:
    """Peak memory, mean load, energy and mean power of the successful files.

    Energy and power come from the devices' cumulative energy counters when every file
    has them (`efficiency.counter_energy`: exact, whatever the sampling interval), else
    from power x time between samples (an estimate that misses what happens between
    samples)."""
    memory: list[float] = []
    loads: list[float] = []
    energy = 0.0
    has_power = False
    power_by_group: dict[str, list[float]] = defaultdict(list)
    counters = {fr.tag: counter_energy(fr) for fr in files}
    use_counters = bool(files) and all(c is not None for c in counters.values())
    for fr in files:
        per_dev: dict[str, list[tuple[float | None, float]]] = defaultdict(list)
        sample_power: list[float] = []
        for t, gd in fr.gpudata:
            total_p, seen_p = 0.0, False
            for dev, d in gd.items():
                if not isinstance(d, dict):
                    continue
                mem = d.get("memory")
                if isinstance(mem, list | tuple) and mem and isinstance(mem[0], int | float):
                    memory.append(float(mem[0]))
                if isinstance(d.get("load"), int | float):
                    loads.append(float(d["load"]))
                p = d.get("power")
                if isinstance(p, int | float) and not isinstance(p, bool):
                    per_dev[str(dev)].append((t, float(p)))
                    total_p += float(p)
                    seen_p = True
            if seen_p:
                sample_power.append(total_p)
        key = (fr.device or "all") if per_gpu else "all"
        found = counters[fr.tag]
        if use_counters and found is not None:
            energy += found.joules
            has_power = True
            power_by_group[key].append(found.mean_power)
            continue
        for series in per_dev.values():
            timed = sorted((t, p) for t, p in series if t is not None)
            for (t0, p0), (t1, _) in zip(timed, timed[1:], strict=False):
                energy += p0 * (t1 - t0)
                has_power = True
        if sample_power:
            power_by_group[key].append(stats.mean(sample_power))
    br.peak_memory = max(memory) if memory else None
    estimates = [fr.memory_estimate for fr in files if fr.memory_estimate is not None]
    br.memory_estimate = max(estimates) / 2**20 if estimates else None
    _torch_memory(br, files)
    br.mean_load = stats.mean(loads) if loads else None
    if has_power:
        br.energy = energy
        br.energy_source = "counter" if use_counters else "power"
    if power_by_group:
        br.mean_power = math.fsum(stats.mean(v) for v in power_by_group.values())
        if br.mean_power > 0 and not math.isnan(br.raw_rate):
            br.perf_per_watt = br.raw_rate / br.mean_power


def _torch_memory(br: BenchResult, files: list[FileResult]) -> None:
    """torch's peaks (`benchkit.devicemem`, MiB) and counters of the successful files,
    the largest over their processes, as `peak_memory` is the largest over their devices;
    None where no process recorded the figure."""
    records = [m for fr in files for m in fr.torch_memory]

    def largest(key: str) -> Any:
        values = [m[key] for m in records if m.get(key) is not None]
        return max(values) if values else None

    br.torch_peak_allocated = largest("max_allocated")
    br.torch_peak_reserved = largest("max_reserved")
    br.torch_alloc_retries = largest("alloc_retries")
    br.torch_ooms = largest("ooms")


def apply_efficiency(br: BenchResult, peaks: PeakTable | None) -> None:
    """TFLOPS (with the rate's interval) and MFU from the benchmark's FLOPs declaration
    and the device's peak (`milabench.report.efficiency`)."""
    ok = [fr for fr in br.files if br.statuses.get(fr.tag) == SUCCESS]
    found = efficiency(
        rate=br.raw_rate,
        ci_low=br.ci_low,
        ci_high=br.ci_high,
        ngpu=br.ngpu,
        files=ok or br.files,
        peaks=peaks,
    )
    br.flops_per_item = found.flops_per_item
    br.flops_precision = found.flops_precision
    br.flops_source = found.flops_source
    br.tflops, br.tflops_low, br.tflops_high = found.tflops, found.tflops_low, found.tflops_high
    br.product = found.product
    br.peak_tflops = found.peak_tflops
    br.mfu = found.mfu
    br.hardware_flops_per_item = found.hardware_flops_per_item
    br.hardware_tflops, br.hfu = found.hardware_tflops, found.hfu


def count_devices(files: list[FileResult]) -> int:
    """The accelerators a benchmark ran on, every node counted.

    A device is known by its node and its index: device indexes restart at 0 on every
    node, so a two-node job on 8 GPUs per node ran on 16 devices, not on the 8 indexes
    that the nodes share. Per-device processes (tags ``D<i>``) name their device; one
    process seeing all the devices of its node counts what the node's monitor sampled.
    In a multi-node launch only global rank 0 writes samples (its node's devices): every
    node runs the same ``--nproc-per-node``, so a node without samples counts as many
    devices as the nodes that have them (the largest such count). A run on a machine
    without an accelerator (every file's `meta` says arch ``cpu``, no accelerator sample)
    ran on none: its ``D0`` process is the CPU's, and the row says 0 as the System block
    does."""
    arches = {((fr.meta or {}).get("accelerators") or {}).get("arch") for fr in files}
    if files and arches == {"cpu"} and not any(fr.gpudata for fr in files):
        return 0
    tagged = {(fr.node, fr.device) for fr in files if fr.device is not None}
    if tagged:
        return len(tagged)
    per_node: dict[str | None, set[str]] = defaultdict(set)
    for fr in files:
        per_node[fr.node].update(str(k) for _, gd in fr.gpudata for k in gd)
    seen = [len(keys) for keys in per_node.values() if keys]
    if not seen:
        return 0
    return sum(len(keys) or max(seen) for keys in per_node.values())


def aggregate_benchmark(br: BenchResult, peaks: PeakTable | None = None) -> BenchResult:
    """Fill the statistics of `br` from `br.files` (see the module docstring); ``peaks``
    (device peak TFLOPS) gives the MFU, without it only the TFLOPS are filled."""
    files = br.files
    if files and all(fr.phase != "run" for fr in files):
        br.phase = files[0].phase
    groups_with_rates = {fr.group_key for fr in files if fr.rates}
    active = []
    for fr in files:
        st = file_status(fr, fr.group_key in groups_with_rates)
        br.statuses[fr.tag] = st
        if st != outcome.SKIPPED:
            active.append(fr)
    br.n = len(active)
    ok = [fr for fr in active if br.statuses[fr.tag] == SUCCESS]
    br.fail = br.n - len(ok)
    per_gpu = br.plan_method == "per_gpu" or any(fr.device is not None for fr in files)
    br.ngpu = count_devices(active)
    br.inputs = next((fr.inputs for fr in files if fr.inputs), None)
    br.units = next((fr.units for fr in ok if fr.units), None)
    pooled = [r for fr in ok for r in fr.rates]
    br.samples = stats.trim(pooled)
    if br.samples:
        br.summary = stats.summarize(br.samples)
        if per_gpu:
            by_dev: dict[str, list[float]] = defaultdict(list)
            for fr in ok:
                by_dev[fr.device or "0"].extend(fr.rates)
            br.device_rates = {d: stats.mean(stats.trim(v)) for d, v in sorted(by_dev.items())}
            br.raw_rate = math.fsum(br.device_rates.values())
        else:
            br.raw_rate = br.summary.mean
        br.score = br.raw_rate * (1.0 - br.fail / br.n)
    else:
        br.score = 0.0
    _accelerator_stats(br, ok, per_gpu)
    _measurement_quality(br, ok, per_gpu)
    _instrumentation_overhead(br, ok)
    apply_interference(br, ok or active)  # a failed benchmark's XIDs explain it too
    apply_efficiency(br, peaks)
    several = len(active) > 1
    for fr in active:
        prefix = f"{fr.tag}: " if several else ""
        br.warnings.extend(prefix + text for text in fr.recorded_warnings)
        if fr.group_key not in groups_with_rates:
            br.warnings.extend(prefix + text for text in unmeasured_warnings(fr))
    br.reason = missing_reason(br)
    return br


def combine_halfwidths(groups: list[list[tuple[float, float]]]) -> float:
    """Absolute half-width of a sum over groups (devices) of averages over repeats.

    Each group holds ``(half-width, value)`` per repeat. Its mean has two uncertainties,
    and the larger one is kept:
    * within runs: the repeats' intervals as independent estimates, ``sqrt(sum h^2) / k``;
    * between runs: with ``k >= 2`` repeats, the Student t interval of the repeats' values,
      ``t(k - 1) * sd / sqrt(k)``. A single run's interval only sees the noise inside that
      run; the host's drift from one run to the next (1-4% on the development machine,
      more than a run's own +/-1-2%) shows only across repeats, which is why
      ``milabench run --repeat 3`` gives intervals that can be taken at their word.
    The groups are summed (per_gpu: the rate is the sum over devices), so their
    half-widths add in quadrature.
    """
    total = 0.0
    for pairs in groups:
        k = len(pairs)
        within = math.sqrt(math.fsum(h * h for h, _ in pairs)) / k
        between = 0.0
        if k >= 2:
            values = [v for _, v in pairs]
            between = t975(k - 1) * stats.stdev(values) / math.sqrt(k)
        half = max(within, between)
        total += half * half
    return math.sqrt(total)


def _measurement_quality(br: BenchResult, ok: list[FileResult], per_gpu: bool) -> None:
    """Observations, times, the 95% interval of the rate, the target, the warnings.

    Peak RSS is over every process that ran, failed ones included (a process killed for
    its memory should show how much it had); the rest describes the reported figure, so
    only the successful files count.
    """
    rss = [
        fr.peak_rss
        for fr in br.files
        if fr.peak_rss is not None and br.statuses.get(fr.tag) != outcome.SKIPPED
    ]
    br.peak_rss = max(rss) if rss else None
    measured = [fr for fr in ok if fr.rates]
    if not measured:
        return
    windows = {fr.tag: file_window(fr) for fr in measured}
    br.observations = sum(w.observations for w in windows.values())
    warm = [w.warmup_s for w in windows.values() if w.warmup_s is not None]
    br.warmup_s = max(warm) if warm else None
    spans = [w.measured_s for w in windows.values() if w.measured_s is not None]
    br.measured_s = max(spans) if spans else None
    br.target = windows[measured[0].tag].target
    br.min_observations = windows[measured[0].tag].min_observations
    br.target_met = all(w.met for w in windows.values())
    several = len(measured) > 1
    for fr in measured:
        prefix = f"{fr.tag}: " if several else ""
        br.warnings.extend(prefix + text for text in window_warnings(windows[fr.tag], fr))
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for fr in measured:
        found = windows[fr.tag].interval
        if found is None:  # one observation: its error cannot be told, nor the sum's
            return
        # The relative half-width is the benchmark's own (same rates, same code), scaled to
        # the value the report prints for that file, so a row and its warning agree.
        value = stats.mean(stats.trim(fr.rates))
        groups[(fr.device or "0") if per_gpu else "all"].append((found.halfwidth * value, value))
    centre = br.raw_rate
    if math.isnan(centre):
        return
    half = combine_halfwidths(list(groups.values()))
    br.ci_low, br.ci_high = centre - half, centre + half
    br.halfwidth = half / abs(centre) if centre else None


def _instrumentation_overhead(br: BenchResult, ok: list[FileResult]) -> None:
    """The largest overhead of the successful files, and a warning above `OVERHEAD_WARN`."""
    found = [(fr, o) for fr in ok if (o := file_overhead(fr)) is not None]
    if not found:
        return
    fr, worst = max(found, key=lambda pair: pair[1].fraction)
    br.overhead, br.overhead_per_step_s = worst.fraction, worst.per_step_s
    text = overhead_warning(worst)
    if text:
        br.warnings.append((f"{fr.tag}: " if len(ok) > 1 else "") + text)


def missing_reason(br: BenchResult) -> str | None:
    """Why a benchmark has no value (None when it has one)."""
    if br.summary is not None:
        return None
    if br.phase != "run":
        return f"{br.phase} log"
    if not br.files:
        return "not run" if br.enabled else "disabled"
    statuses = set(br.statuses.values())
    groups = {fr.group_key for fr in br.files if fr.rates}
    if statuses == {outcome.SKIPPED}:
        return next(fr.skip_reason for fr in br.files if fr.skip_reason)
    for st in (outcome.TIMED_OUT, outcome.INTERRUPTED, outcome.INCOMPLETE):
        if st in statuses:
            return st
    details = sorted(
        {
            failure_detail(fr, br.statuses[fr.tag], fr.group_key in groups)
            for fr in br.files
            if br.statuses[fr.tag] == outcome.FAILED
        }
    )
    return "failed" + (f" ({', '.join(details)})" if details else "")


@dataclass
class SuiteScore:
    score: float | None  # None: nothing weighted was measured (`reason` says why)
    failure_rate: float
    verdict: str
    total_n: int
    total_fail: int
    reason: str | None = None  # why there is no score


# The first words of `missing_reason`, counted by `no_score_reason`.
_REASON_WORDS = ("failed", "skipped", "timed out", "interrupted", "incomplete", "not run",
                 "disabled")  # fmt: skip


def no_score_reason(benches: list[BenchResult]) -> str | None:
    """Why the suite has no score (None when it has one): no weighted benchmark measured.

    The formula gives 1 for a suite in which nothing was measured (every term scores 0,
    ``exp(0) = 1``), which reads as a measurement: the report prints a dash and this."""
    rows = [br for br in benches if br.phase == "run"]
    measured = [br for br in rows if br.summary is not None]
    if any(br.effective_weight > 0 for br in measured):
        return None
    if measured:
        names = ", ".join(br.name for br in measured[:5]) + (", ..." if len(measured) > 5 else "")
        return f"no benchmark that measured a rate has a weight ({names})"
    counts: dict[str, int] = {}
    for br in rows:
        reason = br.reason or "not run"
        word = next((w for w in _REASON_WORDS if reason.startswith(w)), reason)
        counts[word] = counts.get(word, 0) + 1
    parts = ", ".join(f"{n} {word}" for word, n in counts.items())
    return "no benchmark succeeded" + (f" ({parts})" if parts else "")


def suite_score(
    benches: list[BenchResult], *, max_failure_rate: float = outcome.DEFAULT_MAX_FAILURE_RATE
) -> SuiteScore:
    """Weighted geometric mean with +1 smoothing, failure rate and the PASS/FAIL verdict.

    No score (None, with the reason) when no weighted benchmark measured a rate."""
    benches = [br for br in benches if br.phase == "run"]
    num = den = 0.0
    for br in benches:
        w = br.effective_weight
        if w <= 0:
            continue
        s = br.score if br.summary is not None and not math.isnan(br.score) else 0.0
        num += w * math.log(max(s, 0.0) + 1.0)
        den += w
    reason = no_score_reason(benches)
    score = math.exp(num / den) if den > 0 and reason is None else None
    total_n = sum(br.n for br in benches)
    total_fail = sum(br.fail for br in benches)
    rate = total_fail / total_n if total_n else 0.0
    # The failure-rate part of the rule (the report's verdict adds the validation layers).
    verdict = outcome.run_verdict(
        total_n=total_n, total_fail=total_fail, max_failure_rate=max_failure_rate
    ).verdict
    return SuiteScore(score, rate, verdict, total_n, total_fail, reason)
