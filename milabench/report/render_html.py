"""Self-contained HTML report: tables plus inline SVG plots, no network, no JavaScript.

Plots: per-benchmark bars with error bars (rate +/- its 95% interval, as in the table), and for each benchmark
the throughput over time per process/device, and accelerator load and memory over time
(host CPU load/memory when no accelerator was sampled, e.g. on a CPU-only machine).
The page, its tables, charts and escaping come from `milabench.htmlkit`.
"""

from __future__ import annotations

from milabench.htmlkit.charts import bar_chart, line_chart
from milabench.htmlkit.markup import Markup, bullets, el
from milabench.htmlkit.page import page
from milabench.htmlkit.table import Cell, table, verdict_class
from milabench.report.aggregate import BenchResult, fmt_overhead
from milabench.report.build import Report
from milabench.report.render_tables import (
    breakdown_rows,
    comparison_headline,
    doctor_lines,
    fmt_halfwidth,
    parity_lines,
    rate_lines,
    score_text,
    system_value,
    table_cells,
    table_columns,
    verdict_line,
    warning_lines,
)
from milabench.rundata.numbers import fmt_pct, fmt_sig
from milabench.rundata.reader import FileResult

SYSTEM_KEYS = ("cpu", "n_cpu", "product", "n_gpu", "memory", "hostname", "build")
Series = dict[str, list[tuple[float, float]]]


def _t0(files: list[FileResult]) -> float:
    times = [fr.start_time for fr in files if fr.start_time is not None]
    times += [t for fr in files for t in fr.rate_times if t is not None]
    times += [t for fr in files for t, _ in fr.gpudata + fr.cpudata if t is not None]
    return min(times) if times else 0.0


def _throughput_series(files: list[FileResult], t0: float) -> Series:
    out = {}
    for fr in files:
        pts = [(t - t0, r) for t, r in zip(fr.rate_times, fr.rates, strict=True) if t is not None]
        if not pts and fr.rates:  # untimed records: index as x
            pts = [(float(i), r) for i, r in enumerate(fr.rates)]
        if pts:
            out[fr.tag] = pts
    return out


def _usage_series(files: list[FileResult], t0: float) -> tuple[Series, Series, str]:
    load: Series = {}
    mem: Series = {}
    for fr in files:
        for t, gd in fr.gpudata:
            if t is None:
                continue
            for dev, d in gd.items():
                if not isinstance(d, dict):
                    continue
                label = f"{fr.tag}:gpu{dev}"
                if isinstance(d.get("load"), int | float):
                    load.setdefault(label, []).append((t - t0, 100.0 * float(d["load"])))
                m = d.get("memory")
                if isinstance(m, list | tuple) and m and isinstance(m[0], int | float):
                    mem.setdefault(label, []).append((t - t0, float(m[0])))
    if load or mem:
        return load, mem, "accelerator"
    for fr in files:
        for t, cd in fr.cpudata:
            if t is None:
                continue
            if isinstance(cd.get("load"), int | float):
                load.setdefault(fr.tag, []).append((t - t0, float(cd["load"])))
            m = cd.get("memory")
            if isinstance(m, list | tuple) and m and isinstance(m[0], int | float):
                mem.setdefault(fr.tag, []).append((t - t0, float(m[0]) / 2**20))
    return load, mem, "host"


def _section(title: str, lines: list[str]) -> list[Markup]:
    """A heading and its list, nothing when `lines` is empty."""
    if not lines:
        return []
    return [el("h2", title), bullets(lines, class_="warnings")]


def _comparison(report: Report) -> list[str]:
    headline = comparison_headline(report)
    return ([headline] if headline else []) + parity_lines(report) + rate_lines(report)


def _breakdown(report: Report) -> Markup:
    rows = breakdown_rows(report)
    columns = table_columns(rows)
    cells = [[*table_cells(r, columns), r.get("reason") or ""] for r in rows]
    return table([*columns, "reason"], cells, numeric=range(1, len(columns)), class_="breakdown")


def _validations(report: Report) -> Markup:
    items = []
    for layer in report.layers:
        details = [*layer.failures, *(f"warning: {m}" for m in layer.warnings)]
        state = "passed" if layer.passed else "failed"
        items.append(el("li", f"{layer.name}: {state}", bullets(details),
                        class_=verdict_class(layer.passed)))  # fmt: skip
    return el("ul", items)


def _errors(report: Report) -> list[Markup]:
    if not report.errors:
        return []
    out = [el("h2", "Errors")]
    for g in report.errors:
        out += [
            el("h3", g.bench, " ", el("small", f"({', '.join(g.tags)})")),
            el("p", el("code", g.line)),
            el("pre", "\n".join(g.excerpt)),
        ]
    return out


def _benchmark(br: BenchResult) -> list[Markup]:
    """A benchmark's figure and its three plots over time (nothing when it did not run)."""
    files = [fr for fr in br.files if br.statuses.get(fr.tag) != "skipped"]
    if not files or br.phase != "run":
        return []
    t0 = _t0(files)
    load, mem, source = _usage_series(files, t0)
    units = br.units or "rate"
    figure = (
        f"perf {fmt_sig(br.perf)} {units} (95% interval {fmt_halfwidth(br.halfwidth)}, "
        f"{br.observations:,} observations"
        + (f", overhead {fmt_overhead(br.overhead)}" if br.overhead is not None else "")
        + f"), score {fmt_sig(br.score if br.summary else None)}"
        + (f", reason: {br.reason}" if br.reason else "")
    )
    plots = [
        line_chart(f"{br.name}: throughput per device", _throughput_series(files, t0),
                   ylabel=units, css="plot-throughput"),
        line_chart(f"{br.name}: {source} load (%)", load, ylabel="load %", css="plot-load"),
        line_chart(f"{br.name}: {source} memory (MiB)", mem, ylabel="MiB", css="plot-memory"),
    ]  # fmt: skip
    return [el("h3", br.name, id=f"bench-{br.name}"), el("p", figure),
            el("div", plots, class_="plots")]  # fmt: skip


def render_html(report: Report) -> str:
    ok = report.exit_code == 0
    verdict = el("p", el("b", verdict_line(report)),
                 f": failure rate {fmt_pct(100 * report.failure_rate)}, "
                 f"score {score_text(report)}", class_=f"verdict {verdict_class(ok)}")  # fmt: skip
    sources = [el("code", str(s)) for s in report.sources]
    system = [[Cell(key, header=True), system_value(key, report.system.get(key))]
              for key in SYSTEM_KEYS]  # fmt: skip
    bars = [(br.name, br.raw_rate, _ci_half(br)) for br in report.benchmarks if br.summary]
    return page(
        f"milabench report: {report.verdict}",
        el("h1", "milabench report"),
        verdict,
        el("p", "Sources: ", [[", " if i else None, s] for i, s in enumerate(sources)]),
        bullets(report.verdict_reasons, class_="reasons fail") if report.verdict_reasons else None,
        el("h2", "System"),
        table([], system, class_="system"),
        el("h2", "Breakdown"),
        _breakdown(report),
        *_section("Warnings", warning_lines(report)),
        *_section("Comparison with upstream milabench", _comparison(report)),
        *_section("Machine at the start (milabench doctor)", doctor_lines(report)),
        el(
            "div",
            bar_chart("Rate per benchmark (± 95% interval)", bars, ylabel="rate", css="plot-bars"),
            class_="plots",
        ),  # fmt: skip
        el("h2", "Validations"),
        _validations(report),
        *_errors(report),
        el("h2", "Benchmarks"),
        *[part for br in report.benchmarks for part in _benchmark(br)],
    )


def _ci_half(br: BenchResult) -> float:
    """Absolute half-width of the benchmark's 95% interval (0 when it has none)."""
    if br.ci_low is None or br.ci_high is None:
        return 0.0
    return (br.ci_high - br.ci_low) / 2
