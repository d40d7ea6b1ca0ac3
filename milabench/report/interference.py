"""Interference during the measured window: what slowed a benchmark that was not itself.

Two sources, both recorded in every run file: the runner's ``interference`` records
(`milabench.execute.interference`: other processes' CPU time, steal, CPU pressure, the
busiest other processes) and the accelerator samples (``gpudata``, `benchkit.monitors`:
clock-event reasons, clocks, power, temperature, XID errors). `file_interference` keeps
the samples inside the measured window and sums them: shares of the CPU capacity
(``seconds x cpus``) for CPU time, shares of the samples for GPU reasons.
`apply_interference` puts the worst file's summary on the benchmark (the
``interference`` column, a JSON-able ``detail``), one warning per cause with numbers,
and a warning for a window that ended with ``target unreachable``. Thresholds
(`OTHERS_WARN`, ...) are shares above which a cause is named: below them the figures
stay in the detail, so a quiet host's report stays quiet. The window, the column and
the warnings: docs/doctor.md "In the report".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from milabench.machine.procfs import command_label
from milabench.rundata.reader import FileResult

OTHERS_WARN = 0.10  # other processes busy on a tenth of the CPUs
STEAL_WARN = 0.02  # 2% of the CPU time stolen by the hypervisor
PRESSURE_NOTE = 0.10  # PSI share quoted next to a CPU cause
GPU_REASON_WARN = 0.05  # thermal / hardware slowdowns in 5% of the samples
POWER_CAP_WARN = 0.50  # power cap in half of the samples (common near full load)
TOP_NAMED = 0.10  # busiest processes named in the sentence: the first two, then >= 0.1 CPU

GPU_CAUSES = (
    ("thermal slowdown", ("sw_thermal_slowdown", "hw_thermal_slowdown"), GPU_REASON_WARN),
    ("hardware slowdown", ("hw_slowdown",), GPU_REASON_WARN),
    ("power brake", ("hw_power_brake_slowdown",), GPU_REASON_WARN),
    ("power cap", ("sw_power_cap",), POWER_CAP_WARN),
)


@dataclass
class GpuSummary:
    """One device over the window: share of samples per clock-event reason, figures."""

    samples: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # reason -> samples with it
    sm_clock_mean: float | None = None
    sm_clock_min: float | None = None
    power_mean: float | None = None
    temperature_max: float | None = None
    xid: list[int] = field(default_factory=list)
    # samples with any reason of each `GPU_CAUSES` group, and the raw series
    with_any: dict[tuple[str, ...], int] = field(default_factory=dict, repr=False)
    sm_clocks: list[float] = field(default_factory=list, repr=False)
    powers: list[float] = field(default_factory=list, repr=False)

    def share(self, names: tuple[str, ...]) -> float:
        """Share of the samples with any of ``names`` (a `GPU_CAUSES` group)."""
        if not self.samples:
            return 0.0
        return self.with_any.get(names, 0) / self.samples

    def add(self, d: dict) -> None:
        """Count one ``gpudata`` sample of this device."""
        self.samples += 1
        names = [n for n in d.get("clock_events") or [] if isinstance(n, str)]
        for name in names:
            self.reasons[name] = self.reasons.get(name, 0) + 1
        for _, group, _ in GPU_CAUSES:
            if any(n in group for n in names):
                self.with_any[group] = self.with_any.get(group, 0) + 1
        clocks = d.get("clocks")
        sm = _number(clocks.get("sm")) if isinstance(clocks, dict) else None
        if sm is not None:
            self.sm_clocks.append(sm)
            self.sm_clock_mean = math.fsum(self.sm_clocks) / len(self.sm_clocks)
            self.sm_clock_min = min(self.sm_clocks)
        power = _number(d.get("power"))
        if power is not None:
            self.powers.append(power)
            self.power_mean = math.fsum(self.powers) / len(self.powers)
        temp = _number(d.get("temperature"))
        if temp is not None:
            self.temperature_max = (
                temp if self.temperature_max is None else max(self.temperature_max, temp)
            )
        for code in d.get("xid") or []:
            if _number(code) is not None:
                self.xid.append(int(code))


@dataclass
class Interference:
    """What the rest of the machine did during one file's measured window."""

    seconds: float = 0.0  # seconds covered by host samples
    cpus: int = 0
    others: float | None = None  # share of the CPU capacity used by other processes
    steal: float | None = None  # share of the CPU capacity stolen
    pressure: float | None = None  # share of the time with some task waiting for a CPU
    # the busiest other commands: name, most processes seen at once, mean CPUs
    top: list[tuple[str, int, float]] = field(default_factory=list)
    gpus: dict[str, GpuSummary] = field(default_factory=dict)

    def causes(self) -> list[tuple[str, str]]:
        """``(short, sentence)`` for every cause above its threshold, worst first."""
        out: list[tuple[float, str, str]] = []
        cpu_note = ""
        if self.pressure is not None and self.pressure >= PRESSURE_NOTE:
            cpu_note = f"; CPU pressure {_pct(self.pressure)} of the window"
        if self.others is not None and self.others >= OTHERS_WARN:
            busiest = ""
            if self.top:
                busiest = " (busiest: " + ", ".join(
                    f"{command_label(name, count)} {cpus:.2f} CPU"
                    for i, (name, count, cpus) in enumerate(self.top)
                    if i < 2 or cpus >= TOP_NAMED
                ) + ")"  # fmt: skip
            out.append(
                (
                    self.others,
                    f"others {_pct(self.others)}",
                    f"other processes used {_pct(self.others)} of the {self.cpus} CPUs during "
                    f"the measured window{busiest}{cpu_note}",
                )
            )
            cpu_note = ""
        if self.steal is not None and self.steal >= STEAL_WARN:
            out.append(
                (
                    self.steal * 2,  # stolen time hurts more than it reads
                    f"steal {_pct(self.steal)}",
                    f"steal {_pct(self.steal)} of the window: the hypervisor gave these CPUs "
                    f"to other guests{cpu_note}",
                )
            )
        for device, g in sorted(self.gpus.items(), key=lambda kv: _device_order(kv[0])):
            for label, names, threshold in GPU_CAUSES:
                share = g.share(names)
                if share >= threshold:
                    extra = []
                    if label == "thermal slowdown" and g.temperature_max is not None:
                        extra.append(f"up to {g.temperature_max:.0f} °C")
                    if label.startswith("power") and g.power_mean is not None:
                        extra.append(f"mean {g.power_mean:.0f} W")
                    if g.sm_clock_mean is not None:
                        extra.append(f"SM clock {g.sm_clock_mean:.0f} MHz on average")
                    detail = f" ({', '.join(extra)})" if extra else ""
                    out.append(
                        (
                            share if label != "power cap" else share / 4,
                            f"{label} GPU {device} {_pct(share)}",
                            f"{label} on GPU {device} in {_pct(share)} of samples{detail}",
                        )
                    )
            if g.xid:
                codes = ", ".join(str(x) for x in sorted(set(g.xid)))
                out.append(
                    (
                        10.0,
                        f"XID {codes} GPU {device}",
                        f"XID error {codes} on GPU {device} during the window (see the "
                        "driver's log: dmesg | grep -i xid)",
                    )
                )
        out.sort(key=lambda item: -item[0])
        return [(short, sentence) for _, short, sentence in out]

    def short(self) -> str:
        """The column text: the causes in a few words, or the largest figure when none."""
        found = self.causes()
        if found:
            return ", ".join(short for short, _ in found[:2]) + (" ..." if len(found) > 2 else "")
        return "none"

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": _round(self.seconds),
            "cpus": self.cpus,
            "others": _round(self.others),
            "steal": _round(self.steal),
            "pressure": _round(self.pressure),
            "top": [[n, p, _round(c)] for n, p, c in self.top],
            "gpus": {
                d: {
                    "samples": g.samples,
                    "reasons": {k: _round(v / g.samples) for k, v in g.reasons.items()}
                    if g.samples
                    else {},
                    "sm_clock_mean": _round(g.sm_clock_mean),
                    "sm_clock_min": g.sm_clock_min,
                    "power_mean": _round(g.power_mean),
                    "temperature_max": g.temperature_max,
                    "xid": list(g.xid),
                }
                for d, g in self.gpus.items()
            },
            "causes": [sentence for _, sentence in self.causes()],
        }

    def score(self) -> float:
        """How much interference, to pick the worst file of a benchmark."""
        found = self.causes()
        return len(found) * 10 + (self.others or 0.0) + 2 * (self.steal or 0.0)


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _pct(fraction: float) -> str:
    value = 100.0 * fraction
    return f"{value:.0f}%" if value >= 9.5 else f"{value:.1f}%"


def _device_order(key: str) -> tuple[int, str]:
    return (int(key), key) if key.isdigit() else (1 << 30, key)


def _window(fr: FileResult) -> tuple[float | None, float | None]:
    """(start, end) epoch seconds of the measured window, as well as the file tells."""
    start = fr.measure_start
    end = fr.window_end
    times = [t for t in fr.rate_times if t is not None]
    if start is None and times:
        start = times[0]
    if end is None and times:
        end = times[-1]
    return start, end


def _inside(samples: list[tuple[float | None, dict]], start: float | None, end: float | None,
            seconds_key: str | None = None) -> list[tuple[float | None, dict]]:  # fmt: skip
    """The samples whose middle lies in [start, end]; all of them when none does."""
    if start is None or end is None or end <= start:
        return samples
    inside = []
    for t, data in samples:
        if t is None:
            continue
        span = data.get(seconds_key) if seconds_key else None
        middle = t - (float(span) / 2 if isinstance(span, int | float) else 0.0)
        if start <= middle <= end:
            inside.append((t, data))
    return inside or samples


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def file_interference(fr: FileResult) -> Interference | None:
    """The interference of one file's measured window (None when it recorded none)."""
    start, end = _window(fr)
    host = _inside(fr.interference, start, end, "seconds")
    gpu_samples = [
        (t, gd)
        for t, gd in _inside(fr.gpudata, start, end)
        if any(isinstance(d, dict) and ("clock_events" in d or "xid" in d) for d in gd.values())
    ]
    if not host and not gpu_samples:
        return None
    out = Interference()
    seconds = capacity = others = steal = pressure = 0.0
    have_steal = have_pressure = have_others = False
    top: dict[str, float] = {}
    counts: dict[str, int] = {}
    for _, rec in host:
        span = _number(rec.get("seconds"))
        cpus = _number(rec.get("cpus"))
        if not span or not cpus:
            continue
        seconds += span
        capacity += span * cpus
        out.cpus = int(cpus)
        if (v := _number(rec.get("others"))) is not None:
            others += v
            have_others = True
        if (v := _number(rec.get("steal"))) is not None:
            steal += v
            have_steal = True
        if (v := _number(rec.get("pressure"))) is not None:
            pressure += v
            have_pressure = True
        for item in rec.get("top") or []:
            if isinstance(item, list | tuple) and len(item) == 3:
                cpus_used, count = _number(item[2]), _number(item[1])
                if cpus_used is not None:
                    name = str(item[0])
                    top[name] = top.get(name, 0.0) + cpus_used * span
                    counts[name] = max(counts.get(name, 1), int(count or 1))
    out.seconds = seconds
    if capacity > 0:
        out.others = others / capacity if have_others else None
        out.steal = steal / capacity if have_steal else None
    if seconds > 0:
        out.pressure = min(pressure / seconds, 1.0) if have_pressure else None
        ranked = sorted(top.items(), key=lambda kv: -kv[1])[:5]
        out.top = [(name, counts[name], used / seconds) for name, used in ranked]
    single = len({k for _, gd in gpu_samples for k in gd}) == 1 and fr.device is not None
    for _, gd in gpu_samples:
        for key, d in gd.items():
            if not isinstance(d, dict):
                continue
            label = str(fr.device) if single else str(key)
            out.gpus.setdefault(label, GpuSummary()).add(d)
    return out


def unreachable_warning(fr: FileResult, cause: Interference | None) -> str | None:
    """The sentence for a window that ended ``unreachable`` (None for any other end)."""
    win = fr.window or {}
    if win.get("reason") != "unreachable":
        return None
    info = win.get("unreachable") if isinstance(win.get("unreachable"), dict) else {}
    at, h = _number(info.get("at_s")), _number(info.get("halfwidth"))
    t1, h1 = _number(info.get("earlier_s")), _number(info.get("earlier_halfwidth"))
    target = _number(win.get("target"))
    text = "target unreachable: the window ended early"
    if at is not None:
        text += f" at {at:.0f} s"
    if None not in (h, h1, t1, at):
        text += (
            f", its interval had stopped shrinking (±{_pct(h1)} at {t1:.0f} s, "
            f"±{_pct(h)} at {at:.0f} s"
        )
        text += f"; ±{_pct(target)} wanted)" if target is not None else ")"
    found = cause.causes() if cause is not None else []
    if found:
        text += "; cause seen: " + "; ".join(sentence for _, sentence in found[:2])
    else:
        text += "; no interference seen: the benchmark's own step times vary"
    return text


def missed_at_max_warning(fr: FileResult, cause: Interference | None) -> str | None:
    """The sentence for a window that measured to its ``max`` and missed its target
    without the target-unreachable rule giving up on it (its interval still narrowing,
    or within the rule's margin of the target): more time may meet it. None for any
    other end."""
    win = fr.window or {}
    if win.get("reason") != "max_time" or win.get("met") is not False:
        return None
    seen, wanted = _number(win.get("observations")), _number(win.get("min_observations"))
    if seen is not None and wanted is not None and seen < wanted:
        return None  # too few observations for the rule: the report's own warning says so
    measured, h = _number(win.get("measured_s")), _number(win.get("halfwidth"))
    target = _number(win.get("target"))
    text = "target missed at max: the window measured to its end"
    if measured is not None:
        text += f" ({measured:.0f} s)"
    if h is not None and target is not None:
        text += f" and ended at ±{_pct(h)} (±{_pct(target)} wanted)"
    text += ", close enough or still narrowing, so more time may meet it (measure.max)"
    found = cause.causes() if cause is not None else []
    if found:
        text += "; cause seen: " + "; ".join(sentence for _, sentence in found[:2])
    return text


def apply_interference(br: Any, ok: list[FileResult]) -> None:
    """Fill ``br.interference`` (JSON-able), ``br.interference_text`` (the column),
    ``br.target_unreachable``, and add one warning per cause (``tag:`` prefixed when the
    benchmark has several files)."""
    files = [fr for fr in ok if fr.rates] or list(ok)
    found = {fr.tag: file_interference(fr) for fr in files}
    known = {tag: i for tag, i in found.items() if i is not None}
    several = len(files) > 1
    if known:
        tag, worst = max(known.items(), key=lambda kv: kv[1].score())
        br.interference = worst.as_dict()
        br.interference_text = worst.short()
        sentences = [s for _, s in worst.causes()]
        prefix = f"{tag}: " if several and len(known) > 1 else ""
        br.warnings.extend(prefix + s for s in sentences)
    for fr in files:
        text = unreachable_warning(fr, found.get(fr.tag))
        if text:
            br.target_unreachable = True
        else:
            text = missed_at_max_warning(fr, found.get(fr.tag))
        if text:
            br.warnings.append((f"{fr.tag}: " if several else "") + text)
