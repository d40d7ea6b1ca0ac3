"""Efficiency of a benchmark: achieved TFLOPS, model FLOPs utilisation, energy, items/J.

Why here and not in the benchmarks: a benchmark only knows the work one item costs (it
declares ``flops_per_item`` once, `benchkit.flops`); what that work means depends on the
device that ran it, which only the run's metadata says. So the report turns

* rate (items/s) x FLOPs per item into TFLOPS, with the rate's 95% interval scaled alike;
* TFLOPS / (devices x the device's peak for the declared precision) into MFU, the peaks
  coming from a table (``config/peaks.yaml``, overridable with ``--peaks FILE`` or
  ``MILABENCH_PEAKS``); an unknown device or precision gives no MFU rather than a guess;
* the accelerators' cumulative energy counters (NVML's total energy, rocm-smi's
  accumulated energy, xpu-smi's energy consumed; ``energy`` in joules in the ``gpudata``
  samples) into joules per process and a mean power; without counters, power x time
  between samples (the older estimate) is kept;
* rate / mean power into items per joule.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milabench.errors import ConfigError
from milabench.rundata.reader import FileResult

PEAKS_ENV = "MILABENCH_PEAKS"
DEFAULT_PEAKS = Path(__file__).resolve().parents[2] / "config" / "peaks.yaml"
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class PeakEntry:
    """Dense (no sparsity) peak TFLOPS of one device model, per precision.

    ``peaks`` are the datasheet's figures for the whole package; ``dies`` is how many
    devices the monitors (and the frameworks) list for one package: an MI250X is two
    GCDs, each its own device with half the package's peak. `PeakTable.peak` gives the
    figure of one listed device, package / dies."""

    pattern: str  # matched case-insensitively as a substring of the product name
    peaks: Mapping[str, float]
    source: str = ""
    dies: int = 1


class PeakTable:
    """Device models -> peaks; the longest pattern found in a product name wins, so
    ``H100 PCIe`` beats ``H100`` for "NVIDIA H100 PCIe"."""

    def __init__(self, entries: list[PeakEntry]) -> None:
        self.entries = sorted(entries, key=lambda e: len(e.pattern), reverse=True)

    def lookup(self, product: str | None) -> PeakEntry | None:
        if not product:
            return None
        name = product.lower()
        return next((e for e in self.entries if e.pattern.lower() in name), None)

    def peak(self, product: str | None, precision: str | None) -> float | None:
        """Peak TFLOPS of ONE device as the monitors list it (a die of a multi-die
        package: the package's figure / ``dies``), None when unknown."""
        entry = self.lookup(product)
        if entry is None or not precision:
            return None
        value = entry.peaks.get(precision)
        if not isinstance(value, int | float) or value <= 0:
            return None
        return float(value) / entry.dies

    def merged(self, other: PeakTable) -> PeakTable:
        """This table with ``other``'s entries replacing those of the same pattern."""
        mine = {e.pattern.lower(): e for e in self.entries}
        mine.update({e.pattern.lower(): e for e in other.entries})
        return PeakTable(list(mine.values()))


class PeakTableError(ConfigError):
    """A peaks file that cannot be read; the message names the file and the entry."""


def parse_peaks(data: Any, origin: str) -> PeakTable:
    """``{devices: {<pattern>: {fp32: .., tf32: .., fp16: .., bf16: .., fp8: .., source: ..,
    dies: ..}}}`` (``dies``: devices listed per package, default 1)."""
    devices = data.get("devices") if isinstance(data, dict) else None
    if not isinstance(devices, dict):
        raise PeakTableError(f"{origin}: expected a mapping `devices: {{<product>: {{...}}}}`")
    entries = []
    for pattern, row in devices.items():
        if not isinstance(row, dict):
            raise PeakTableError(f"{origin}: devices.{pattern}: expected a mapping of peaks")
        peaks: dict[str, float] = {}
        dies = row.get("dies", 1)
        if isinstance(dies, bool) or not isinstance(dies, int) or dies < 1:
            raise PeakTableError(
                f"{origin}: devices.{pattern}.dies: expected a whole number of devices per "
                f"package (1 or more), got {dies!r}"
            )
        for key, value in row.items():
            if key in ("source", "dies"):
                continue
            if key not in PRECISIONS:
                raise PeakTableError(
                    f"{origin}: devices.{pattern}.{key}: unknown precision "
                    f"(expected one of {', '.join(PRECISIONS)})"
                )
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise PeakTableError(
                    f"{origin}: devices.{pattern}.{key}: expected a positive number of "
                    f"TFLOPS, got {value!r}"
                )
            peaks[key] = float(value)
        entries.append(PeakEntry(str(pattern), peaks, str(row.get("source") or ""), dies))
    return PeakTable(entries)


def load_peaks(path: str | os.PathLike | None = None) -> PeakTable:
    """The shipped table, with ``path`` (or ``$MILABENCH_PEAKS``) merged over it."""
    # The shipped table lives next to the suites; an installation without them (a wheel)
    # reports TFLOPS but no MFU rather than failing the report.
    table = (
        parse_peaks(_read(DEFAULT_PEAKS), str(DEFAULT_PEAKS))
        if DEFAULT_PEAKS.is_file()
        else PeakTable([])
    )
    extra = path or os.environ.get(PEAKS_ENV)
    if extra:
        extra_path = Path(extra)
        if not extra_path.is_file():
            raise PeakTableError(f"{extra_path}: peaks file not found")
        table = table.merged(parse_peaks(_read(extra_path), str(extra_path)))
    return table


def _read(path: Path) -> Any:
    from milabench.config.yamlio import read_yaml

    try:
        return read_yaml(path)
    except (ConfigError, OSError) as exc:
        raise PeakTableError(str(exc)) from None


# -- FLOPs ---------------------------------------------------------------------------


def declared_flops(files: list[FileResult]) -> dict | None:
    """The benchmark's FLOPs declaration (the first file that has one)."""
    return next((fr.flops for fr in files if fr.flops), None)


def product_of(files: list[FileResult]) -> str | None:
    """The accelerator model the benchmark ran on (the most common in the metadata)."""
    seen: Counter[str] = Counter()
    for fr in files:
        acc = (fr.meta or {}).get("accelerators") or {}
        gpus = acc.get("gpus") if isinstance(acc, dict) else None
        if not isinstance(gpus, dict):
            continue
        keys = [fr.device] if fr.device is not None and fr.device in gpus else list(gpus)
        for key in keys:
            gpu = gpus.get(key)
            if isinstance(gpu, dict) and gpu.get("product"):
                seen[str(gpu["product"])] += 1
    return seen.most_common(1)[0][0] if seen else None


@dataclass
class Efficiency:
    flops_per_item: float | None = None
    flops_precision: str | None = None
    flops_source: str | None = None
    tflops: float | None = None
    tflops_low: float | None = None
    tflops_high: float | None = None
    product: str | None = None
    peak_tflops: float | None = None  # all devices together
    mfu: float | None = None  # 0..1
    # Hardware FLOPs (recomputation under activation checkpointing included), when the
    # benchmark declared them beside its model FLOPs: TFLOPS and utilisation (HFU).
    hardware_flops_per_item: float | None = None
    hardware_tflops: float | None = None
    hfu: float | None = None


def efficiency(
    *,
    rate: float,
    ci_low: float | None,
    ci_high: float | None,
    ngpu: int,
    files: list[FileResult],
    peaks: PeakTable | None,
) -> Efficiency:
    """TFLOPS and MFU of a benchmark whose rate is ``rate`` items/s on ``ngpu`` devices
    (every device of every node), from its model FLOPs per item; the hardware FLOPs (with
    recomputation), when declared, give ``hardware_tflops`` and ``hfu`` beside them."""
    out = Efficiency()
    decl = declared_flops(files)
    if not decl:
        return out
    per_item = decl.get("flops_per_item")
    if not isinstance(per_item, int | float) or not per_item > 0:
        return out
    out.flops_per_item = float(per_item)
    out.flops_precision = decl.get("precision") or "fp32"
    out.flops_source = decl.get("flops_source")
    if not math.isfinite(rate):
        return out
    out.tflops = rate * per_item / 1e12
    hardware = decl.get("hardware_flops_per_item")
    if isinstance(hardware, int | float) and hardware > 0:
        out.hardware_flops_per_item = float(hardware)
        out.hardware_tflops = rate * hardware / 1e12
    if ci_low is not None and ci_high is not None:
        out.tflops_low = ci_low * per_item / 1e12
        out.tflops_high = ci_high * per_item / 1e12
    out.product = product_of(files)
    if peaks is not None and ngpu > 0:
        peak = peaks.peak(out.product, out.flops_precision)
        if peak:
            out.peak_tflops = peak * ngpu
            out.mfu = out.tflops / out.peak_tflops
            if out.hardware_tflops is not None:
                out.hfu = out.hardware_tflops / out.peak_tflops
    return out


# -- energy --------------------------------------------------------------------------


@dataclass
class FileEnergy:
    joules: float  # summed over the file's devices
    seconds: float  # the longest span of counter samples
    mean_power: float  # watts, summed over devices


def counter_energy(fr: FileResult) -> FileEnergy | None:
    """Energy from the cumulative counters of the file's samples, None without them.

    Per device: last - first counter value over the samples. A counter that went
    backwards anywhere (a driver reload, a wrap) makes the file's figure unusable, and
    the report falls back to power x time: a figure is never silently too small."""
    series: dict[str, list[tuple[float, float]]] = {}
    for t, gd in fr.gpudata:
        if t is None:
            continue
        for dev, d in gd.items():
            e = d.get("energy") if isinstance(d, dict) else None
            if isinstance(e, int | float) and not isinstance(e, bool) and math.isfinite(e):
                series.setdefault(str(dev), []).append((t, float(e)))
    if not series:
        return None
    joules = power = 0.0
    span = 0.0
    for points in series.values():
        points.sort()
        if len(points) < 2:
            return None
        if any(b[1] < a[1] for a, b in zip(points, points[1:], strict=False)):
            return None
        (t0, e0), (t1, e1) = points[0], points[-1]
        if t1 <= t0:
            return None
        joules += e1 - e0
        power += (e1 - e0) / (t1 - t0)
        span = max(span, t1 - t0)
    return FileEnergy(joules, span, power)
