"""From `FileResult`s to per-benchmark statistics, benchmark scores and the suite score.

Rules (spec report.md sections 1-3, written out in docs/reports.md):
* a file succeeds when the instrumentation stopped it early, or when it returned 0 with at
  least one `train_rate` sample and no NaN loss; capability skips are neither;
* the rate samples of the successful files of a benchmark are pooled, the single min and
  max dropped when there are 5 or more (`stats.trim`), then summarised;
* benchmark score = (per_gpu: sum over devices of each device's trimmed mean rate;
  otherwise the trimmed mean of the pooled rates) x (1 - fail / n);
* suite score = exp(sum w ln(score + 1) / sum w), w = weight x enabled; an enabled,
  weighted benchmark without a result scores 0 and carries the reason.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from milabench.report import stats
from milabench.report.runs import FileResult

SUCCESS = "success"


def file_status(fr: FileResult, group_has_rates: bool = False) -> str:
    """success | skipped | timed out | interrupted | incomplete | failed."""
    if fr.skipped:
        return "skipped"
    if fr.early_stop:
        return SUCCESS
    rc = fr.return_code
    if rc == "TIMEOUT":
        return "timed out"
    if rc == "INTERRUPTED":
        return "interrupted"
    if not fr.has_end:
        return "incomplete"
    has_rates = bool(fr.rates) or (fr.node is not None and group_has_rates)
    if rc == 0 and has_rates and not fr.nan_loss:
        return SUCCESS
    return "failed"


def failure_detail(fr: FileResult, status: str) -> str:
    """Why a file is not a success, in a few words."""
    if status in ("timed out", "interrupted", "incomplete"):
        return status if status != "incomplete" else "incomplete (no end event)"
    if fr.return_code not in (0, None):
        return f"exit code {fr.return_code}"
    if fr.nan_loss:
        return "NaN loss"
    if not fr.rates:
        return "no throughput sample"
    return status


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
    mean_load: float | None = None
    energy: float | None = None  # joules
    mean_power: float | None = None  # watts
    perf_per_watt: float | None = None
    reason: str | None = None
    phase: str = "run"

    @property
    def perf(self) -> float:
        return self.summary.mean if self.summary else math.nan

    @property
    def effective_weight(self) -> float:
        return float(self.weight) * (1.0 if self.enabled else 0.0)


def apply_entry(br: BenchResult, entry: dict) -> None:
    br.weight = float(entry.get("weight", br.weight) or 0.0)
    br.enabled = bool(entry.get("enabled", True))
    br.group = entry.get("group", br.group)
    plan = entry.get("plan") or {}
    if isinstance(plan, dict):
        br.plan_method = plan.get("method", br.plan_method)


def _accelerator_stats(br: BenchResult, files: list[FileResult], per_gpu: bool) -> None:
    memory: list[float] = []
    loads: list[float] = []
    energy = 0.0
    has_power = False
    power_by_group: dict[str, list[float]] = defaultdict(list)
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
        for series in per_dev.values():
            timed = sorted((t, p) for t, p in series if t is not None)
            for (t0, p0), (t1, _) in zip(timed, timed[1:], strict=False):
                energy += p0 * (t1 - t0)
                has_power = True
        if sample_power:
            key = (fr.device or "all") if per_gpu else "all"
            power_by_group[key].append(stats.mean(sample_power))
    br.peak_memory = max(memory) if memory else None
    br.mean_load = stats.mean(loads) if loads else None
    if has_power:
        br.energy = energy
    if power_by_group:
        br.mean_power = math.fsum(stats.mean(v) for v in power_by_group.values())
        if br.mean_power > 0 and not math.isnan(br.raw_rate):
            br.perf_per_watt = br.raw_rate / br.mean_power


def aggregate_benchmark(br: BenchResult) -> BenchResult:
    """Fill the statistics of `br` from `br.files` (see the module docstring)."""
    files = br.files
    if files and all(fr.phase != "run" for fr in files):
        br.phase = files[0].phase
    groups_with_rates = {fr.group_key for fr in files if fr.rates}
    active = []
    for fr in files:
        st = file_status(fr, fr.group_key in groups_with_rates)
        br.statuses[fr.tag] = st
        if st != "skipped":
            active.append(fr)
    br.n = len(active)
    ok = [fr for fr in active if br.statuses[fr.tag] == SUCCESS]
    br.fail = br.n - len(ok)
    per_gpu = br.plan_method == "per_gpu" or any(fr.device is not None for fr in files)
    devices = {fr.device for fr in active if fr.device is not None}
    if not devices:  # one process seeing all devices: count what the monitors saw
        devices = {str(k) for fr in active for _, gd in fr.gpudata for k in gd}
    br.ngpu = len(devices)
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
    br.reason = missing_reason(br)
    return br


def missing_reason(br: BenchResult) -> str | None:
    """Why a benchmark has no value (None when it has one)."""
    if br.summary is not None:
        return None
    if br.phase != "run":
        return f"{br.phase} log"
    if not br.files:
        return "not run" if br.enabled else "disabled"
    statuses = set(br.statuses.values())
    if statuses == {"skipped"}:
        return next(fr.skip_reason for fr in br.files if fr.skip_reason)
    for st in ("timed out", "interrupted", "incomplete"):
        if st in statuses:
            return st
    details = sorted(
        {
            failure_detail(fr, br.statuses[fr.tag])
            for fr in br.files
            if br.statuses[fr.tag] == "failed"
        }
    )
    return "failed" + (f" ({', '.join(details)})" if details else "")


@dataclass
class SuiteScore:
    score: float
    failure_rate: float
    verdict: str
    total_n: int
    total_fail: int


def suite_score(benches: list[BenchResult], *, max_failure_rate: float = 0.01) -> SuiteScore:
    """Weighted geometric mean with +1 smoothing, failure rate and the PASS/FAIL verdict."""
    benches = [br for br in benches if br.phase == "run"]
    num = den = 0.0
    for br in benches:
        w = br.effective_weight
        if w <= 0:
            continue
        s = br.score if br.summary is not None and not math.isnan(br.score) else 0.0
        num += w * math.log(max(s, 0.0) + 1.0)
        den += w
    score = math.exp(num / den) if den > 0 else 0.0
    total_n = sum(br.n for br in benches)
    total_fail = sum(br.fail for br in benches)
    rate = total_fail / total_n if total_n else 0.0
    verdict = "PASS" if total_n and rate <= max_failure_rate else "FAIL"
    return SuiteScore(score, rate, verdict, total_n, total_fail)
