"""Text, Markdown, JSON and HTML renderings of a `FleetReport` (milabench/fleet/report.py).

Every human format prints the same parts in the same order: the verdict (which nodes are
flagged, the exit code), the nodes (status, hardware, phase times), the benchmarks x nodes
table (rate ±95% interval and rate / fleet median, flagged cells marked), every flag with
its one-line reason, the environment keys that differ, the baseline comparison and the
notes. Numbers for people go through `numbers.fmt_sig` (3 significant digits); JSON keeps
full precision and carries `schema_version`. The HTML page is one self-contained file
(inline CSS and SVG, no script, no network) built with `milabench.htmlkit`, like every page.
"""

from __future__ import annotations

import json
import math
from typing import Any

from milabench.fleet.model import (
    BELOW_BASELINE,
    CELL_NO_RUN,
    FAILED,
    FLEET_REPORT_SCHEMA_VERSION,
    MAD_SCALE,
    MIN_NODES,
    SLOW,
    Baseline,
    BenchCell,
    BenchRow,
    DoctorRow,
    EnvRow,
    Flag,
    FleetData,
    FleetNode,
    FleetReport,
    FleetThresholds,
    SummaryRow,
    short_value,
)
from milabench.htmlkit.charts import bar_chart
from milabench.htmlkit.markup import Markup, bullets, el
from milabench.htmlkit.page import page
from milabench.htmlkit.table import Cell, status_class, table, verdict_class
from milabench.rundata.numbers import MISSING, fmt_seconds, fmt_sig

PHASES = ("install", "prepare", "run")


# -- shared pieces -----------------------------------------------------------------------


def verdict_line(report: FleetReport) -> str:
    """``PASS: no node flagged among 5 (exit code 0)`` or ``FLAGGED: 2 of 5 nodes (a, b)
    (exit code 1)``."""
    names = report.flagged_nodes
    if not names:
        return f"PASS: no node flagged among {len(report.nodes)} (exit code {report.exit_code})"
    return (
        f"FLAGGED: {len(names)} of {len(report.nodes)} nodes ({', '.join(names)}) "
        f"(exit code {report.exit_code})"
    )


def rule_line(report: FleetReport) -> str:
    """The slow rule with this report's settings, in one sentence."""
    th = report.thresholds
    return (
        f"slow = below the fleet median by more than max({th.mad_k:g} x 1.4826 x MAD of the "
        "other nodes, "
        f"{_pct(th.min_gap)} of the median) with the node's 95% interval below the median "
        f"(compared when at least {MIN_NODES} nodes report a benchmark)"
        + (
            f"; below baseline = more than {_pct(th.tolerance)} under the expected rate"
            if report.baseline is not None
            else ""
        )
    )


def _pct(fraction: float | None) -> str:
    if fraction is None:
        return MISSING
    return f"{fmt_sig(100.0 * fraction, 2)}%"


def _halfwidth(cell: BenchCell) -> str:
    hw = cell.halfwidth
    return "" if hw is None else f" ±{_pct(hw)}"


def _marks(report: FleetReport, node: str, bench: str | None) -> list[str]:
    kinds = {f.kind for f in report.flags_of(node, bench)}
    out = []
    if SLOW in kinds:
        out.append("SLOW")
    if BELOW_BASELINE in kinds:
        out.append("BELOW BASELINE")
    if FAILED in kinds:
        out.append("FAILED")
    return out


def cell_text(report: FleetReport, row: BenchRow, node: str, marks: bool = True) -> str:
    """``1,600 ±0.06% (1.00x)``; a word when there is no rate; flag marks appended."""
    cell = row.cells[node]
    if cell.rate is None:
        if cell.status == CELL_NO_RUN:
            status = report.data.node(node).status
            text = status if status != "ok" else "no run"
        else:
            text = cell.status
    else:
        rel = row.relative.get(node)
        text = f"{fmt_sig(cell.rate)}{_halfwidth(cell)}" + (
            f" ({rel:.2f}x)" if rel is not None else ""
        )
    tags = _marks(report, node, row.name) if marks else []
    if tags and not (cell.rate is None and tags == ["FAILED"]):
        text += " " + " ".join(tags)
    return text


def summary_text(report: FleetReport, node: str) -> str:
    s = report.summary
    if s is None or node not in s.values:
        return MISSING
    hw = s.halfwidths.get(node)
    text = f"{s.values[node]:.2f}x" + ("" if hw is None else f" ±{_pct(hw)}")
    check = s.slow.get(node)
    if (
        check is not None
        and check.slow
        and any(f.kind == SLOW and f.benchmark is None for f in report.flags_of(node))
    ):
        text += " SLOW"
    return text


def node_rows(report: FleetReport) -> list[list[str]]:
    """Cells of the Nodes table: name, host, status, hardware, phase times, verdict, flags."""
    out = []
    for node in report.data.nodes:
        flags = [f for f in report.flagged if f.node == node.name]
        kinds = sorted({f.kind for f in flags})
        verdict = node.report.verdict if node.report is not None else MISSING
        out.append(
            [
                node.name,
                node.host or MISSING,
                node.status,
                node.hardware or MISSING,
                *[fmt_seconds(node.phase_seconds.get(p)) for p in PHASES],
                verdict,
                ", ".join(kinds) if kinds else MISSING,
            ]
        )
    return out


NODE_COLUMNS = ["node", "host", "status", "hardware", *PHASES, "run report", "flags"]
NODE_NUMERIC = range(4, 4 + len(PHASES))


def rate_columns(report: FleetReport) -> list[str]:
    """``node``, one column per benchmark (with its units), ``overall`` when there is one.

    Nodes are rows: a rack has tens to hundreds of nodes and a suite a handful of
    benchmarks, so the table grows down, not across the terminal."""
    cols = ["node"] + [f"{r.name} ({r.units})" if r.units else r.name for r in report.benchmarks]
    if report.summary is not None:
        cols.append("overall")
    return cols


def rate_numeric(report: FleetReport) -> range:
    return range(1, len(rate_columns(report)))


def _gap_range(gaps: tuple[float, float] | None) -> str:
    """``10%`` when every node is allowed the same gap, ``10-39%`` when the spread of the
    others (hence the gap) differs from node to node."""
    if gaps is None:
        return MISSING
    low, high = _pct(gaps[0]), _pct(gaps[1])
    return low if low == high else f"{low.rstrip('%')}-{high}"


def rate_head_rows(report: FleetReport) -> list[list[str]]:
    """The fleet's own rows above the nodes: median, spread across nodes (1.4826 x MAD,
    the robust standard deviation, as a fraction of the median), allowed gap, nodes."""
    s = report.summary
    median = ["fleet median"] + [fmt_sig(r.median) for r in report.benchmarks]
    spread = ["spread (1.4826 MAD)"] + [
        _pct(MAD_SCALE * r.mad / r.median) if r.mad is not None and r.median else MISSING
        for r in report.benchmarks
    ]
    gap = ["allowed gap"] + [
        _gap_range(r.allowed_gaps) if r.compared else "not compared" for r in report.benchmarks
    ]
    count = ["nodes reporting"] + [str(r.reporting) for r in report.benchmarks]
    if s is not None:
        median.append(MISSING if s.median is None else f"{s.median:.2f}x")
        spread.append(
            _pct(MAD_SCALE * s.mad / s.median) if s.mad is not None and s.median else MISSING
        )
        gap.append(_gap_range(s.allowed_gaps) if s.compared else "not compared")
        count.append(str(len(s.values)))
    return [median, spread, gap, count]


def rate_node_rows(report: FleetReport) -> list[list[str]]:
    """One row per node: ``1,600 ±0.06% (1.00x)`` per benchmark, flag marks appended."""
    rows = []
    for name in report.nodes:
        cells = [name] + [cell_text(report, r, name) for r in report.benchmarks]
        if report.summary is not None:
            cells.append(summary_text(report, name))
        rows.append(cells)
    return rows


def rate_rows(report: FleetReport) -> list[list[str]]:
    return rate_head_rows(report) + rate_node_rows(report)


def env_table(report: FleetReport) -> list[list[str]]:
    """Keys whose values differ: key, majority value, each differing node with its value."""
    out = []
    for row in report.environment:
        if not row.differing:
            continue
        majority = (
            "no majority"
            if row.tie
            else f"{short_value(row.majority)} ({row.majority_count} of {len(row.values)})"
        )
        differing = ", ".join(f"{n}: {short_value(row.values[n])}" for n in row.differing)
        out.append([row.key, majority, differing, "ignored" if row.ignored else "flagged"])
    return out


ENV_COLUMNS = ["key", "majority value", "nodes that differ", "verdict"]
NO_NUMBERS = range(0)


def same_env_line(report: FleetReport) -> str:
    """The keys every node agrees on, with their values (short)."""
    same = [r for r in report.environment if not r.differing]
    if not same:
        return ""
    nodes = max(len(r.values) for r in same)
    parts = [f"{r.key} {short_value(r.majority)}" for r in same]
    return f"same on all {nodes} nodes that recorded it: " + ", ".join(parts)


def doctor_table(report: FleetReport) -> tuple[list[str], list[list[str]]]:
    """Doctor checks that are not ok on some node: one row per check, one column per
    node with its severity (``-``: not checked there), then the nodes' reasons."""
    columns = ["check", "subject"] + report.nodes
    rows = []
    for row in report.doctor:
        cells = [row.check, row.subject]
        cells += [row.findings[n].severity if n in row.findings else MISSING for n in report.nodes]
        rows.append(cells)
    return columns, rows


def doctor_details(report: FleetReport) -> list[str]:
    """``node: severity subject check: reason`` for every problem of the doctor table."""
    return [
        f"{n}: {row.findings[n].severity} {row.subject} {row.check}: {row.findings[n].reason}"
        for row in report.doctor
        for n in row.problems
    ]


def _doctor_checked(report: FleetReport) -> int:
    return sum(1 for n in report.data.nodes if n.doctor)


def baseline_rows(report: FleetReport) -> list[list[str]]:
    """Benchmark, hardware model, expected rate, each node's rate / expected."""
    b = report.baseline
    if b is None:
        return []
    out = []
    for row in report.benchmarks:
        for node in report.data.nodes:
            if node.name not in row.baseline:
                continue
            expected = row.baseline[node.name]
            cell = row.cells[node.name]
            ratio = cell.rate / expected if cell.rate is not None else None
            mark = (
                " BELOW"
                if any(f.kind == BELOW_BASELINE for f in report.flags_of(node.name, row.name))
                else ""
            )
            out.append(
                [
                    row.name,
                    node.name,
                    node.hardware or MISSING,
                    fmt_sig(expected),
                    fmt_sig(cell.rate) + _halfwidth(cell),
                    (MISSING if ratio is None else f"{ratio:.2f}x") + mark,
                ]
            )
    return out


BASELINE_COLUMNS = ["benchmark", "node", "hardware model", "expected", "rate", "rate/expected"]
BASELINE_NUMERIC = range(3, 6)


def header_lines(report: FleetReport) -> list[tuple[str, str]]:
    d = report.data
    suite = d.config or MISSING
    if d.select:
        suite += f" (select: {', '.join(d.select)})"
    if d.exclude:
        suite += f" (exclude: {', '.join(d.exclude)})"
    return [
        ("Folder", str(d.folder)),
        ("Suite", suite),
        ("Started", d.started or MISSING),
        ("Ended", d.ended or "not ended"),
        ("Rule", rule_line(report)),
    ]


# -- text --------------------------------------------------------------------------------


def _grid(columns: list[str], rows: list[list[str]], numeric: range) -> list[str]:
    """Aligned columns; those in `numeric` to the right."""
    cells = [columns, *rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    lines = []
    for c in cells:
        parts = [
            v.rjust(w) if i in numeric else v.ljust(w)
            for i, (v, w) in enumerate(zip(c, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


def _title(text: str) -> list[str]:
    return ["", text, "-" * len(text)]


def render_text(report: FleetReport) -> str:
    lines = [f"Fleet report: {report.data.name}"]
    lines += [f"{k + ':':<9}{v}" for k, v in header_lines(report)]
    lines.append(f"Verdict: {verdict_line(report)}")
    lines += _title("Nodes") + _grid(NODE_COLUMNS, node_rows(report), NODE_NUMERIC)
    lines += _title("Rates (each cell: rate ±95% interval (rate / fleet median))")
    grid = _grid(rate_columns(report), rate_rows(report), rate_numeric(report))
    head = 1 + len(rate_head_rows(report))
    lines += grid[:head] + ["-" * max(len(g) for g in grid)] + grid[head:]
    lines += _title("Flags")
    if report.flagged:
        wn = max(len(f.node) for f in report.flagged)
        wb = max(len(f.benchmark or MISSING) for f in report.flagged)
        for f in report.flagged:
            where = f"{f.node:<{wn}}  {f.benchmark or MISSING:<{wb}}"
            lines.append(f"  {where}  {f.kind}: {f.reason}")
    else:
        lines.append("  none")
    lines += _title("Environment")
    table = env_table(report)
    if table:
        lines += _grid(ENV_COLUMNS, table, NO_NUMBERS)
    same = same_env_line(report)
    if same:
        lines.append(same)
    if not report.environment:
        lines.append("no node recorded an environment")
    if _doctor_checked(report):
        lines += _title("Doctor (milabench doctor on each node)")
        if report.doctor:
            columns, rows = doctor_table(report)
            lines += _grid(columns, rows, NO_NUMBERS)
            lines += [f"  ~ {d}" for d in doctor_details(report)]
        else:
            lines.append(f"every check ok on the {_doctor_checked(report)} nodes checked")
    if report.baseline is not None:
        where = report.baseline.path or "baseline"
        src = f" (from {report.baseline.source})" if report.baseline.source else ""
        lines += _title(f"Baseline {where}{src}")
        rows = baseline_rows(report)
        lines += _grid(BASELINE_COLUMNS, rows, BASELINE_NUMERIC) if rows else ["  nothing compared"]
    if report.notes:
        lines += _title("Notes")
        lines += [f"  ~ {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


# -- markdown ----------------------------------------------------------------------------


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(columns: list[str], rows: list[list[str]], numeric: range) -> list[str]:
    out = ["| " + " | ".join(_md(c) for c in columns) + " |"]
    out.append(
        "|" + "|".join("---:" if i in numeric else ":---" for i in range(len(columns))) + "|"
    )
    out += ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]
    return out


def render_markdown(report: FleetReport) -> str:
    icon = "✅" if report.exit_code == 0 else "❌"
    out = [f"## {icon} milabench fleet {report.data.name}: {verdict_line(report)}", ""]
    out += [f"* **{k}**: {_md(v)}" for k, v in header_lines(report)]
    out += ["", "### Nodes", ""] + _md_table(NODE_COLUMNS, node_rows(report), NODE_NUMERIC)
    out += ["", "### Rates", "", "Each cell: rate ±95% interval (rate / fleet median).", ""]
    out += _md_table(rate_columns(report), rate_rows(report), rate_numeric(report))
    out += ["", "### Flags", ""]
    if report.flagged:
        out += [
            f"* **{_md(f.node)}**"
            + (f" {_md(f.benchmark)}" if f.benchmark else "")
            + f" `{f.kind}`: {_md(f.reason)}"
            for f in report.flagged
        ]
    else:
        out.append("none")
    out += ["", "### Environment", ""]
    table = env_table(report)
    if table:
        out += _md_table(ENV_COLUMNS, table, NO_NUMBERS) + [""]
    same = same_env_line(report)
    if same:
        out.append(_md(same))
    if _doctor_checked(report):
        out += ["", "### Doctor", ""]
        if report.doctor:
            columns, rows = doctor_table(report)
            out += _md_table(columns, rows, NO_NUMBERS) + [""]
            out += [f"* {_md(d)}" for d in doctor_details(report)]
        else:
            out.append(f"every check ok on the {_doctor_checked(report)} nodes checked")
    if report.baseline is not None:
        out += ["", f"### Baseline `{report.baseline.path or ''}`", ""]
        rows = baseline_rows(report)
        out += _md_table(BASELINE_COLUMNS, rows, BASELINE_NUMERIC) if rows else ["nothing compared"]
    if report.notes:
        out += ["", "### Notes", ""] + [f"* {_md(n)}" for n in report.notes]
    return "\n".join(out) + "\n"


# -- json --------------------------------------------------------------------------------


def _num(x: float | None) -> float | None:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return x


def _gaps_dict(gaps: tuple[float, float] | None) -> dict[str, float] | None:
    return None if gaps is None else {"min": gaps[0], "max": gaps[1]}


def _check_dict(check: Any) -> dict[str, Any] | None:
    if check is None:
        return None
    return {
        "slow": check.slow,
        "gap": _num(check.gap),
        "threshold": _num(check.threshold),
        "mad_of_others": _num(check.mad),
        "others": check.others,
        "set_by": "mad" if check.by_mad else "min_gap",
        "ci_reaches_median": check.ci_reaches,
    }


def _cell_dict(row: BenchRow, name: str, cell: BenchCell) -> dict[str, Any]:
    """One node's cell of a benchmark row: its rate, interval, slow check and baseline."""
    return {
        "status": cell.status,
        "rate": _num(cell.rate),
        "ci95_low": _num(cell.ci_low),
        "ci95_high": _num(cell.ci_high),
        "units": cell.units,
        "n": cell.n,
        "fail": cell.fail,
        "relative": _num(row.relative.get(name)),
        "slow_check": _check_dict(row.slow.get(name)),
        "baseline": _num(row.baseline.get(name)),
        "reason": cell.reason,
    }


def _benchmark_dict(row: BenchRow) -> dict[str, Any]:
    """One benchmark across the fleet: its median, spread, allowed gap and cells."""
    return {
        "name": row.name,
        "units": row.units,
        "reporting": row.reporting,
        "compared": row.compared,
        "median": _num(row.median),
        "mad": _num(row.mad),
        "allowed_gap": _gaps_dict(row.allowed_gaps),
        "cells": {name: _cell_dict(row, name, cell) for name, cell in row.cells.items()},
    }


def _summary_dict(s: SummaryRow | None) -> dict[str, Any] | None:
    """The overall column (each node's geometric mean of rate / median), or None."""
    if s is None:
        return None
    return {
        "compared": s.compared,
        "median": _num(s.median),
        "mad": _num(s.mad),
        "allowed_gap": _gaps_dict(s.allowed_gaps),
        "nodes": {
            n: {
                "geomean_relative": _num(v),
                "halfwidth": _num(s.halfwidths.get(n)),
                "benchmarks": s.counts.get(n),
                "slow_check": _check_dict(s.slow.get(n)),
            }
            for n, v in s.values.items()
        },
    }


def _baseline_dict(baseline: Baseline | None) -> dict[str, Any] | None:
    """Where the baseline came from, or None without one."""
    if baseline is None:
        return None
    return {
        "path": str(baseline.path) if baseline.path else None,
        "source": baseline.source,
        "schema_version": baseline.schema_version,
    }


def _fleet_dict(d: FleetData) -> dict[str, Any]:
    """The fleet run the report reads: its folder, suite, selection and times."""
    return {
        "name": d.name,
        "folder": str(d.folder),
        "schema_version": d.schema_version,
        "config": d.config,
        "select": d.select,
        "exclude": d.exclude,
        "started": d.started,
        "ended": d.ended,
    }


def _thresholds_dict(th: FleetThresholds) -> dict[str, Any]:
    """The rules' settings, with the constants they use."""
    return {
        "mad_k": th.mad_k,
        "mad_scale": MAD_SCALE,
        "min_gap": th.min_gap,
        "tolerance": th.tolerance,
        "min_nodes": MIN_NODES,
        "ignore_env": list(th.ignore_env),
    }


def _flag_dict(f: Flag) -> dict[str, Any]:
    return {
        "node": f.node,
        "benchmark": f.benchmark,
        "kind": f.kind,
        "reason": f.reason,
        "key": f.key,
    }


def _node_dict(n: FleetNode) -> dict[str, Any]:
    """One node as fleet.json recorded it, with its run's verdict and doctor findings."""
    return {
        "name": n.name,
        "host": n.host,
        "status": n.status,
        "reason": n.reason,
        "phase_seconds": n.phase_seconds,
        "run": n.run,
        "hardware": n.hardware,
        "problem": n.problem,
        "run_verdict": n.report.verdict if n.report is not None else None,
        "environment": n.environment,
        "doctor": [f.as_dict() for f in n.doctor],
    }


def _doctor_dict(r: DoctorRow) -> dict[str, Any]:
    return {
        "check": r.check,
        "subject": r.subject,
        "problems": r.problems,
        "findings": {n: f.as_dict() for n, f in r.findings.items()},
    }


def _environment_dict(r: EnvRow) -> dict[str, Any]:
    return {
        "key": r.key,
        "majority": None if r.tie else r.majority,
        "tie": r.tie,
        "values": r.values,
        "differing": r.differing,
        "ignored": r.ignored,
    }


def fleet_report_dict(report: FleetReport) -> dict[str, Any]:
    """The report as JSON-able data (`render_json`), full precision, `schema_version`."""
    return {
        "schema_version": FLEET_REPORT_SCHEMA_VERSION,
        "kind": "milabench-fleet-report",
        "fleet": _fleet_dict(report.data),
        "thresholds": _thresholds_dict(report.thresholds),
        "exit_code": report.exit_code,
        "flagged_nodes": report.flagged_nodes,
        "flags": [_flag_dict(f) for f in report.flagged],
        "nodes": [_node_dict(n) for n in report.data.nodes],
        "doctor": [_doctor_dict(r) for r in report.doctor],
        "benchmarks": [_benchmark_dict(row) for row in report.benchmarks],
        "summary": _summary_dict(report.summary),
        "environment": [_environment_dict(r) for r in report.environment],
        "baseline": _baseline_dict(report.baseline),
        "notes": report.notes,
    }


def render_json(report: FleetReport) -> str:
    return json.dumps(fleet_report_dict(report), indent=2, default=str) + "\n"


# -- html --------------------------------------------------------------------------------


def _cell_class(report: FleetReport, row: BenchRow, node: str) -> str:
    kinds = {f.kind for f in report.flags_of(node, row.name)}
    for kind in (FAILED, SLOW, BELOW_BASELINE):
        if kind in kinds:
            return kind
    return status_class(row.cells[node].status)


def _html_flags(report: FleetReport) -> Markup:
    if not report.flagged:
        return el("p", "none")
    items = [
        el("li", el("b", f.node), f" {f.benchmark}" if f.benchmark else "", " ",
           el("span", f.kind, class_="kind"), f": {f.reason}", class_=f"flag {f.kind}")
        for f in report.flagged
    ]  # fmt: skip
    return el("ul", items, class_="flags")


def _html_rates(report: FleetReport) -> Markup:
    """The fleet's rows (row headers), then one row per node, flagged cells classed."""
    rows: list[list[str | Cell]] = [
        [Cell(cells[0], header=True), *cells[1:]] for cells in rate_head_rows(report)
    ]
    for name, cells in zip(report.nodes, rate_node_rows(report), strict=True):
        tds: list[str | Cell] = [
            Cell(text, class_=_cell_class(report, row, name), title=row.cells[name].reason)
            for row, text in zip(report.benchmarks, cells[1:], strict=False)
        ]
        if report.summary is not None:
            tds.append(Cell(cells[-1], class_="slow" if "SLOW" in cells[-1] else ""))
        rows.append([Cell(name, header=True), *tds])
    return table(rate_columns(report), rows, numeric=rate_numeric(report), class_="rates")


def _html_charts(report: FleetReport) -> list[Markup]:
    charts = []
    for row in report.benchmarks:
        bars = []
        for n in report.nodes:
            cell, rel = row.cells[n], row.relative.get(n)
            if rel is None:
                continue
            hw = cell.halfwidth
            bars.append((n, rel, 0.0 if hw is None else rel * hw))
        if bars:
            charts.append(bar_chart(f"{row.name}: rate / fleet median (± 95% interval)", bars,
                                    ylabel="x median", css="plot-fleet"))  # fmt: skip
    return [el("h2", "Plots"), el("div", charts, class_="plots")] if charts else []


def _html_doctor(report: FleetReport) -> list[Markup]:
    if not _doctor_checked(report):
        return []
    if not report.doctor:
        return [el("h2", "Doctor"),
                el("p", f"every check ok on the {_doctor_checked(report)} nodes checked")]  # fmt: skip
    columns, rows = doctor_table(report)
    return [el("h2", "Doctor"), table(columns, rows, class_="doctor"),
            bullets(doctor_details(report), class_="notes")]  # fmt: skip


def _html_baseline(report: FleetReport) -> list[Markup]:
    if report.baseline is None:
        return []
    rows = baseline_rows(report)
    return [
        el("h2", "Baseline ", el("code", str(report.baseline.path or ""))),
        table(BASELINE_COLUMNS, rows, numeric=BASELINE_NUMERIC, class_="baseline")
        if rows
        else el("p", "nothing compared"),
    ]


def render_html(report: FleetReport) -> str:
    """One self-contained page (`milabench.htmlkit`: inline CSS and SVG, no script)."""
    ok = report.exit_code == 0
    table_env = env_table(report)
    same = same_env_line(report)
    return page(
        f"milabench fleet report: {report.data.name}",
        el("h1", f"milabench fleet report: {report.data.name}"),
        el("p", el("b", verdict_line(report)), class_=f"verdict {verdict_class(ok)}"),
        el("ul", [el("li", el("b", k), f": {v}") for k, v in header_lines(report)]),
        el("h2", "Flags"),
        _html_flags(report),
        el("h2", "Nodes"),
        table(NODE_COLUMNS, node_rows(report), numeric=NODE_NUMERIC, class_="nodes"),
        el("h2", "Rates"),
        el("p", "Each cell: rate ±95% interval (rate / fleet median)."),
        _html_rates(report),
        el("h2", "Environment"),
        table(ENV_COLUMNS, table_env, class_="environment") if table_env else None,
        el("p", same) if same else None,
        *_html_doctor(report),
        *_html_baseline(report),
        *([el("h2", "Notes"), bullets(report.notes, class_="notes")] if report.notes else []),
        *_html_charts(report),
    )
