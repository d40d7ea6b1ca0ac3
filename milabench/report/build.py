"""`build_report`: run folders (+ optional suite entries) -> a `Report`.

The report is plain data; renderers only format it. Entry fields (weight, enabled, plan)
come from the suite's `all_entries` when the caller has them (so benchmarks that did not
run still weigh in the suite score), otherwise from each file's `config` event.

The verdict and the exit code come from one `outcome.run_verdict` call made here, so the
PASS/FAIL a report prints and the code `milabench run`/`report` exits with cannot differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from milabench.doctor.findings import Finding
from milabench.doctor.record import read_doctor_file
from milabench.report.aggregate import (
    BenchResult,
    SuiteScore,
    aggregate_benchmark,
    apply_entry,
    suite_score,
)
from milabench.report.efficiency import PeakTable, load_peaks
from milabench.report.validation import ErrorGroup, LayerResult, run_layers, select_layers
from milabench.rundata import outcome
from milabench.rundata.reader import FileResult, read_run_dir


@dataclass
class Report:
    """Everything the renderers print, and the verdicts `milabench run` exits with."""

    sources: list[Path]
    system: dict
    benchmarks: list[BenchResult]
    suite: SuiteScore
    layers: list[LayerResult] = field(default_factory=list)
    decision: outcome.Verdict | None = None  # computed from the rest when not given
    # `milabench doctor`'s findings when the run started (``doctor.json`` of each run
    # folder, docs/doctor.md): (run folder name, finding); empty for older runs
    doctor: list[tuple[str, Finding]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.decision is None:
            self.decision = run_outcome(self.benchmarks, self.suite, self.layers, self.sources)

    @property
    def score(self) -> float | None:
        """The suite score; None when no weighted benchmark measured (`score_reason`)."""
        return self.suite.score

    @property
    def score_reason(self) -> str | None:
        """Why there is no score (None when there is one)."""
        return self.suite.reason

    @property
    def failure_rate(self) -> float:
        return self.suite.failure_rate

    @property
    def verdict(self) -> str:
        """PASS or FAIL (`outcome.run_verdict`: failure rate, layers, something measured)."""
        return self.decision.verdict

    @property
    def exit_code(self) -> int:
        """0 exactly when the verdict is PASS (the same `run_verdict` call)."""
        return self.decision.exit_code

    @property
    def verdict_reasons(self) -> list[str]:
        """Every reason for a FAIL ([] for a PASS)."""
        return list(self.decision.reasons)

    @property
    def warnings(self) -> list[tuple[str, str]]:
        """(benchmark, sentence) for every measurement warning (they never fail a run)."""
        return [(br.name, w) for br in self.benchmarks for w in br.warnings]

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
        "build": build_summary(files),
    }


def build_summary(files: list[FileResult]) -> str | None:
    """The builds the benchmarks ran with, from their `meta` records: the environment's
    install variant and CUDA runtime (``cuda12 (CUDA 12.8)``), else the CUDA build chosen
    for the node; several joined with ``, `` (``cuda12 (CUDA 12.8, 12.9)`` when the JAX
    group's runtime differs from torch's); None when no record names one. Two runs whose
    builds differ are not the same software (`milabench compare` says so)."""
    builds: dict[str, set[str]] = {}
    for fr in files:
        meta = fr.meta or {}
        install = (meta.get("environment") or {}).get("install") or {}
        variant = install.get("variant") or (meta.get("cuda_build") or {}).get("variant")
        if not isinstance(variant, str) or not variant:
            continue
        runtimes = builds.setdefault(variant, set())
        if install.get("cuda_runtime"):
            runtimes.add(str(install["cuda_runtime"]))
    parts = []
    for variant in sorted(builds):
        runtimes = sorted(builds[variant])
        parts.append(f"{variant} (CUDA {', '.join(runtimes)})" if runtimes else variant)
    return ", ".join(parts) or None


def build_report(
    run_dirs: list[Path],
    *,
    entries: dict | None = None,
    validations: list[str] | None = None,
    peaks: PeakTable | None = None,
) -> Report:
    """Statistics, scores and validation verdicts of the given run folders.

    ``peaks``: device peak TFLOPS for the MFU column (default: ``config/peaks.yaml`` with
    ``$MILABENCH_PEAKS`` merged over it)."""
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
    if peaks is None:
        peaks = load_peaks()
    rows = [aggregate_benchmark(br, peaks) for br in benches.values()]
    if not entries:  # no suite order: show benchmarks in the order they ran
        rows.sort(key=_first_start)
    layers = run_layers(rows, select_layers(validations))
    return Report(
        sources=run_dirs,
        system=system_summary(files),
        benchmarks=rows,
        suite=suite_score(rows),
        layers=layers,
        doctor=doctor_findings(run_dirs),
    )


def doctor_findings(run_dirs: list[Path]) -> list[tuple[str, Finding]]:
    """The findings each run folder recorded when its run started (``doctor.json``)."""
    out = []
    for run_dir in run_dirs:
        for finding in read_doctor_file(str(run_dir)) or []:
            out.append((Path(run_dir).name, finding))
    return out


def nothing_measured_why(benches: list[BenchResult], sources: list[Path]) -> str:
    """Why a run measured nothing: which benchmarks were skipped, disabled or not run."""
    rows = [br for br in benches if br.phase == "run"]
    where = ", ".join(str(s) for s in sources) or "the run folder"
    if not any(br.files for br in rows):
        if not rows:
            return f"no benchmark ran (no .data file in {where})"
        names = ", ".join(br.name for br in rows[:10]) + (", ..." if len(rows) > 10 else "")
        return f"no benchmark ran (no .data file in {where}; selected: {names})"
    # total_n == 0: every file present was skipped; the other rows have no file at all.
    reasons = [(br.name, br.reason or "not run") for br in rows]
    if all(r.startswith("skipped") for _, r in reasons):
        head = "every selected benchmark was skipped"
    else:
        head = "every selected benchmark was skipped, disabled or not run"
    listed = "; ".join(f"{name} ({r})" for name, r in reasons[:10])
    return f"{head}: {listed}" + ("; ..." if len(reasons) > 10 else "")


def run_outcome(
    benches: list[BenchResult],
    suite: SuiteScore,
    layers: list[LayerResult],
    sources: list[Path],
) -> outcome.Verdict:
    """The one `outcome.run_verdict` call: the printed verdict and the exit code.

    Counts are the run-phase processes that were not skipped. A report of install or
    prepare logs only has none: there every log counts as a process and the `error`
    layer judges them (a log measures nothing, so "nothing measured" would be wrong).
    """
    total_n, total_fail = suite.total_n, suite.total_fail
    has_run = any(br.phase == "run" and br.files for br in benches)
    logs = [fr for br in benches if br.phase != "run" for fr in br.files]
    why = None
    if total_n == 0:
        if not has_run and logs:
            total_n = len(logs)
        else:
            why = nothing_measured_why(benches, sources)
    return outcome.run_verdict(
        total_n=total_n,
        total_fail=total_fail,
        failed_layers=[layer.name for layer in layers if not layer.passed],
        nothing_measured_why=why,
    )


def _first_start(br: BenchResult) -> float:
    starts = [fr.start_time for fr in br.files if fr.start_time is not None]
    return min(starts) if starts else math.inf
