"""`build_report`: run folders (+ optional suite entries) -> a `Report`.

The report is plain data; renderers only format it. Entry fields (weight, enabled, plan)
come from the suite's `all_entries` when the caller has them (so benchmarks that did not
run still weigh in the suite score), otherwise from each file's `config` event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from milabench.report.aggregate import (
    BenchResult,
    SuiteScore,
    aggregate_benchmark,
    apply_entry,
    suite_score,
)
from milabench.report.runs import FileResult, read_run_dir
from milabench.report.validation import ErrorGroup, LayerResult, run_layers, select_layers


@dataclass
class Report:
    """Everything the renderers print, and the verdicts `milabench run` exits with."""

    sources: list[Path]
    system: dict
    benchmarks: list[BenchResult]
    suite: SuiteScore
    layers: list[LayerResult] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.suite.score

    @property
    def failure_rate(self) -> float:
        return self.suite.failure_rate

    @property
    def verdict(self) -> str:
        return self.suite.verdict

    @property
    def exit_code(self) -> int:
        """0 only when every enabled validation layer passed."""
        return 0 if all(layer.passed for layer in self.layers) else 1

    @property
    def errors(self) -> list[ErrorGroup]:
        return [g for layer in self.layers for g in layer.errors]

    def bench(self, name: str) -> BenchResult:
        return next(b for b in self.benchmarks if b.name == name)


def system_summary(files: list[FileResult]) -> dict:
    """cpu model/count and accelerator product/count/memory from the first `meta` record."""
    meta = next((fr.meta for fr in files if fr.meta), None) or {}
    cpu = meta.get("cpu") or {}
    acc = meta.get("accelerators") or {}
    gpus = acc.get("gpus") or {}
    first = next(iter(gpus.values()), {}) if isinstance(gpus, dict) else {}
    mem = (first.get("memory") or {}) if isinstance(first, dict) else {}
    return {
        "cpu": cpu.get("brand"),
        "n_cpu": cpu.get("count"),
        "arch": acc.get("arch"),
        "product": first.get("product") if isinstance(first, dict) else None,
        "n_gpu": len(gpus) if isinstance(gpus, dict) else 0,
        "memory": mem.get("total") if isinstance(mem, dict) else None,
        "hostname": (meta.get("os") or {}).get("nodename"),
    }


def build_report(
    run_dirs: list[Path],
    *,
    entries: dict | None = None,
    validations: list[str] | None = None,
) -> Report:
    """Statistics, scores and validation verdicts of the given run folders."""
    run_dirs = [Path(d) for d in run_dirs]
    files = [fr for d in run_dirs for fr in read_run_dir(d)]
    benches: dict[str, BenchResult] = {}
    for name, entry in (entries or {}).items():
        br = BenchResult(name=name)
        apply_entry(br, entry)
        benches[name] = br
    for fr in files:
        br = benches.get(fr.name)
        if br is None:
            br = benches[fr.name] = BenchResult(name=fr.name)
            if fr.config:
                apply_entry(br, fr.config)
        elif not br.files and fr.config and not entries:
            apply_entry(br, fr.config)
        br.files.append(fr)
    rows = [aggregate_benchmark(br) for br in benches.values()]
    if not entries:  # no suite order: show benchmarks in the order they ran
        rows.sort(key=_first_start)
    layers = run_layers(rows, select_layers(validations))
    return Report(
        sources=run_dirs,
        system=system_summary(files),
        benchmarks=rows,
        suite=suite_score(rows),
        layers=layers,
    )


def _first_start(br: BenchResult) -> float:
    starts = [fr.start_time for fr in br.files if fr.start_time is not None]
    return min(starts) if starts else math.inf


def fmt_float(x: float | None, digits: int = 2) -> str:
    """Fixed decimals, but 4 significant digits for small values (0.01234 TFLOPS)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if 0 < abs(x) < 1:
        return f"{x:.4g}"
    return f"{x:.{digits}f}"
