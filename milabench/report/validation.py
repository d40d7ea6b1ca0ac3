"""Validation layers: each reads the results and adds a verdict bit to the exit code.

Layers on by default: ``error`` (a process did not succeed by `outcome`'s rule),
``ensure_rate`` (a process or multi-node launch produced no throughput sample),
``version`` (no ``meta`` record), ``golden`` (a golden check was out of tolerance).
Opt-in: ``loss`` (a NaN loss), ``usage`` (mean accelerator load below its threshold),
``planning`` (the processes that reported differ from the plan). ``--validations a,b``
adds layers to the default set, ``all`` enables every layer and ``-name`` removes one.
Capability skips are never validation failures. What each layer checks and says:
docs/reports.md "Validation layers".
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from benchkit.golden import fmt_error, fmt_tolerance
from milabench.config.entry import Entry
from milabench.errors import UsageError
from milabench.events import as_float
from milabench.report import stats
from milabench.report.aggregate import (
    SUCCESS,
    BenchResult,
    failure_detail,
    unmeasured_warnings,
)
from milabench.report.tracebacks import Failure, explain, read_lines
from milabench.rundata.numbers import fmt_pct, fmt_sig
from milabench.rundata.outcome import FAILED, SKIPPED

DEFAULT_LAYERS = ("error", "ensure_rate", "version", "golden")
ALL_LAYERS = ("error", "ensure_rate", "version", "loss", "usage", "planning", "golden")


@dataclass
class ErrorGroup:
    """Identical causes of failure within one benchmark, with the tags that hit them."""

    bench: str
    line: str
    tags: list[str]
    excerpt: list[str]
    detail: str


@dataclass
class LayerResult:
    name: str
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[ErrorGroup] = field(default_factory=list)  # `error` layer only

    @property
    def passed(self) -> bool:
        return not self.failures


def select_layers(spec: list[str] | str | None) -> list[str]:
    """Layers enabled by `--validations` values (comma lists, `all`, `-name`)."""
    names: list[str] = []
    for item in [spec] if isinstance(spec, str) else spec or []:
        names.extend(x.strip() for x in str(item).split(",") if x.strip())
    enabled = list(DEFAULT_LAYERS)
    for name in names:
        drop = name.startswith("-")
        key = name.lstrip("-+").replace("-", "_")
        targets = list(ALL_LAYERS) if key == "all" else [key]
        for t in targets:
            if t not in ALL_LAYERS:
                raise UsageError(
                    f"--validations: unknown layer '{key}' (known: {', '.join(ALL_LAYERS)}, all)"
                )
            if drop and t in enabled:
                enabled.remove(t)
            elif not drop and t not in enabled:
                enabled.append(t)
    return [x for x in ALL_LAYERS if x in enabled]


def _active(br: BenchResult):
    return [fr for fr in br.files if br.statuses.get(fr.tag) != SKIPPED]


def layer_error(benches: list[BenchResult]) -> LayerResult:
    """Every process that did not succeed, by the one rule (`milabench.rundata.outcome`).

    The status was decided once by `aggregate` (the same one the failure rate counts);
    this layer only groups the failures by cause and finds each cause's line.
    """
    res = LayerResult("error")
    for br in benches:
        groups: dict[str, ErrorGroup] = {}
        with_rates = {fr.group_key for fr in br.files if fr.rates}
        for fr in _active(br):
            st = br.statuses[fr.tag]
            if st == SUCCESS:
                continue
            detail = failure_detail(fr, st, fr.group_key in with_rates)
            stderr = read_lines(fr.stderr_path) or fr.stderr_lines
            cause: Failure = explain(
                stderr,
                read_lines(fr.stdout_path),
                fr.errors,
                detail,
                ended_by_itself=st == FAILED,  # not stopped: timed out, interrupted, cut
            )
            if cause.line == detail and not fr.rates:  # no better cause: what its records say
                cause = Failure(detail, [*unmeasured_warnings(fr), *cause.excerpt])
            g = groups.setdefault(
                cause.line, ErrorGroup(br.name, cause.line, [], cause.excerpt, detail)
            )
            g.tags.append(fr.tag)
        for g in groups.values():
            res.errors.append(g)
            line = "" if g.line == g.detail else f": {g.line}"
            res.failures.append(f"{br.name}: {g.detail} in {', '.join(g.tags)}{line}")
    return res


def _run_phase(benches: list[BenchResult]) -> list[BenchResult]:
    """Benchmarks of run folders (install/prepare logs are for the `error` layer only)."""
    return [br for br in benches if br.phase == "run"]


def layer_ensure_rate(benches: list[BenchResult]) -> LayerResult:
    res = LayerResult("ensure_rate")
    for br in _run_phase(benches):
        by_group: dict[str, list] = defaultdict(list)
        for fr in _active(br):
            by_group[fr.group_key].append(fr)
        for _key, frs in sorted(by_group.items()):
            if not any(fr.rates for fr in frs):
                tags = ", ".join(fr.tag for fr in frs)
                res.failures.append(f"{br.name}: no throughput sample from {tags}")
    return res


def layer_version(benches: list[BenchResult]) -> LayerResult:
    res = LayerResult("version")
    for br in _run_phase(benches):
        missing = [fr.tag for fr in _active(br) if not fr.meta]
        if missing:
            res.failures.append(
                f"{br.name}: no machine metadata (meta event) in {', '.join(missing)}"
            )
    return res


def layer_loss(benches: list[BenchResult]) -> LayerResult:
    res = LayerResult("loss")
    for br in _run_phase(benches):
        for fr in _active(br):
            if fr.nan_loss:
                kind = "NaN" if any(math.isnan(x) for x in fr.losses) else "infinite"
                res.failures.append(f"{br.name}: {kind} loss in {fr.tag}")
            elif len(fr.losses) >= 4:
                k = max(1, len(fr.losses) // 4)
                if stats.mean(fr.losses[-k:]) > stats.mean(fr.losses[:k]):
                    res.warnings.append(f"{br.name}: loss increases in {fr.tag}")
    return res


def _threshold(entry: Entry, key: str, default: float) -> float:
    """`validation.usage.<key>` of the entry, else MILABENCH_VALIDATION_USAGE_<KEY>, else default."""
    usage = entry.validation.get("usage")
    val = usage.get(key) if isinstance(usage, dict) else None
    if val is None:
        val = os.environ.get(f"MILABENCH_VALIDATION_USAGE_{key.upper()}")
    try:
        return float(val) if val is not None else default
    except (TypeError, ValueError):
        return default


def layer_usage(benches: list[BenchResult]) -> LayerResult:
    res = LayerResult("usage")
    for br in _run_phase(benches):
        active = [fr for fr in _active(br) if br.statuses[fr.tag] == SUCCESS]
        if not active:
            continue
        entry = active[0].entry
        load_t = _threshold(entry, "gpu_load_threshold", 0.5)
        mem_t = _threshold(entry, "gpu_mem_threshold", 0.5)
        loads, mem_frac = [], []
        for fr in active:
            for _, gd in fr.gpudata:
                for d in gd.values():
                    if not isinstance(d, dict):
                        continue
                    if isinstance(d.get("load"), int | float):
                        loads.append(float(d["load"]))
                    mem = d.get("memory")
                    if isinstance(mem, list | tuple) and len(mem) == 2 and mem[1]:
                        mem_frac.append(float(mem[0]) / float(mem[1]))
        if not loads:
            res.warnings.append(f"{br.name}: no accelerator samples, usage not checked")
            continue
        mean_load = stats.mean(loads)
        if mean_load < load_t:
            res.failures.append(
                f"{br.name}: mean accelerator load {fmt_sig(mean_load)} < gpu_load_threshold "
                f"{fmt_sig(load_t)}"
            )
        if mem_frac and max(mem_frac) < mem_t:
            res.warnings.append(
                f"{br.name}: peak memory use {fmt_pct(100 * max(mem_frac))} < gpu_mem_threshold "
                f"{fmt_pct(100 * mem_t)}"
            )
    return res


def expected_processes(br: BenchResult) -> int | None:
    """How many processes per repeat the plan starts (None when it cannot be told)."""
    active = _active(br)
    if not active:
        return None
    entry = active[0].entry
    method = entry.plan.method
    machines = entry.num_machines
    per_node = any(fr.node is not None for fr in active)  # one file per node and launch
    if method == "per_gpu":
        meta = active[0].meta or {}
        gpus = ((meta.get("accelerators") or {}).get("gpus")) or {}
        base = max(1, len(gpus))
    elif method == "njobs":
        n = entry.plan.n
        if n is None:
            return None
        base = n
    else:
        return machines  # one launcher per node (torchrun, accelerate, ...)
    return base * machines if per_node else base


def layer_planning(benches: list[BenchResult]) -> LayerResult:
    res = LayerResult("planning")
    for br in _run_phase(benches):
        expected = expected_processes(br)
        if expected is None:
            continue
        per_repeat: dict[int | None, int] = defaultdict(int)
        for fr in _active(br):
            if fr.n_data or fr.start_time is not None:  # the process started
                per_repeat[fr.repeat] += 1
        repeats = {fr.repeat for fr in _active(br)}
        for rep in sorted(repeats, key=lambda r: -1 if r is None else r):
            got = per_repeat.get(rep, 0)
            if got != expected:
                where = f" (repeat {rep})" if rep is not None else ""
                res.failures.append(
                    f"{br.name}{where}: {got} process(es) started, the plan has {expected}"
                )
    return res


def golden_failed(check: dict) -> bool:
    """A golden payload that says it failed (or, without ``passed``, whose numbers do)."""
    passed = check.get("passed")
    if isinstance(passed, bool):
        return not passed
    err, tol = as_float(check.get("max_rel_error")), as_float(check.get("tolerance"))
    return err is not None and tol is not None and not err <= tol


def layer_golden(benches: list[BenchResult]) -> LayerResult:
    """Golden checks (`benchkit.golden`) that were out of tolerance: fast but wrong.

    One line per benchmark and check (name, dtype), with the largest error among the
    processes that ran it (their tags listed when the benchmark has several processes).
    Processes that wrote no golden record pass.
    """
    res = LayerResult("golden")
    for br in _run_phase(benches):
        active = _active(br)
        failed: dict[tuple[str, str], list[tuple[float, float | None, str]]] = {}
        for fr in active:
            for check in fr.golden:
                if not golden_failed(check):
                    continue
                key = (str(check.get("name", "?")), str(check.get("dtype", "?")))
                err = as_float(check.get("max_rel_error"))
                failed.setdefault(key, []).append(
                    (math.inf if err is None else err, as_float(check.get("tolerance")), fr.tag)
                )
        for (name, dtype), hits in failed.items():
            err, tol, _tag = max(hits, key=lambda h: h[0])
            tags = sorted({h[2] for h in hits})
            where = f" (in {', '.join(tags)})" if len(active) > 1 else ""
            res.failures.append(
                f"{br.name}: golden check {name} {dtype} failed: max relative error "
                f"{fmt_error(err, tol)} > tolerance {fmt_tolerance(tol)}{where}"
            )
    return res


LAYERS: dict[str, Callable[[list[BenchResult]], LayerResult]] = {
    "error": layer_error,
    "ensure_rate": layer_ensure_rate,
    "version": layer_version,
    "loss": layer_loss,
    "usage": layer_usage,
    "planning": layer_planning,
    "golden": layer_golden,
}


def run_layers(benches: list[BenchResult], names: list[str]) -> list[LayerResult]:
    return [LAYERS[name](benches) for name in names]


def is_nan(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))
