"""Text, Markdown, CSV and JSON renderings of a `Report`.

All of them start from `breakdown_rows`, so the numbers are the same in every format.
The text layout follows upstream's report (sources, System, Breakdown, Scores, Errors);
Markdown is the same content fit for a pull-request comment (tables, a folded Errors
section); JSON keeps numbers as numbers (`null` for a missing value, with `reason`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from milabench.report.build import Report, fmt_float

COLUMNS = ["bench", "fail", "n", "ngpu", "perf", "sem%", "std%", "peak_memory", "score", "weight"]


def _num(x: float | None) -> float | None:
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return None
    return x


def breakdown_rows(report: Report) -> list[dict[str, Any]]:
    """One JSON-able dict per benchmark (the JSON `benchmarks` list)."""
    rows = []
    for br in report.benchmarks:
        if br.phase != "run":
            continue
        s = br.summary
        row: dict[str, Any] = {
            "name": br.name,
            "n": br.n,
            "fail": br.fail,
            "ngpu": br.ngpu,
            "perf": _num(br.perf),
            "std": _num(s.std_pct) if s else None,
            "sem": _num(s.sem_pct) if s else None,
            "score": _num(br.score) if s else 0.0,
            "weight": br.effective_weight,
            "units": br.units,
            "enabled": br.enabled,
            "peak_memory": br.peak_memory,
            "mean_load": br.mean_load,
            "energy": br.energy,
            "perf_per_watt": br.perf_per_watt,
            "samples": len(br.samples),
        }
        if s:
            row.update({"min": s.min, "q1": s.q1, "median": s.median, "q3": s.q3, "max": s.max})
        if br.reason:
            row["reason"] = br.reason
        rows.append(row)
    return rows


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _table_cells(row: dict[str, Any]) -> list[str]:
    mem = row["peak_memory"]
    return [
        row["name"],
        str(row["fail"]),
        str(row["n"]),
        str(row["ngpu"]),
        fmt_float(row["perf"]),
        _pct(row["sem"]),
        _pct(row["std"]),
        "-" if mem is None else f"{mem:.0f}",
        fmt_float(row["score"]),
        f"{row['weight']:.2f}",
    ]


def _layer_lines(report: Report) -> list[str]:
    out = []
    for layer in report.layers:
        state = "ok" if layer.passed else "FAILED"
        out.append(f"{layer.name:<12} {state}")
        out.extend(f"  - {msg}" for msg in layer.failures)
        out.extend(f"  ~ warning: {msg}" for msg in layer.warnings)
    return out


def _title(text: str, ch: str = "-") -> list[str]:
    return [text, ch * len(text)]


def render_text(report: Report) -> str:
    rows = breakdown_rows(report)
    lines = [f"Source: {src}" for src in report.sources]
    lines += ["=" * 17, "Benchmark results", "=" * 17, ""]
    lines += _title("System")
    for key in ("cpu", "n_cpu", "product", "n_gpu", "memory"):
        val = report.system.get(key)
        lines.append(f"{key + ':':<10}{'-' if val is None else val}")
    lines += [""] + _title("Breakdown")
    cells = [COLUMNS] + [_table_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    for c in cells:
        parts = [c[0].ljust(widths[0])] + [
            v.rjust(w) for v, w in zip(c[1:], widths[1:], strict=True)
        ]
        lines.append(" | ".join(parts))
    missing = [r for r in rows if r.get("reason")]
    if missing:
        lines += ["", "Missing values:"]
        lines += [f"  {r['name']}: {r['reason']}" for r in missing]
    lines += [""] + _title("Scores")
    lines.append(f"Failure rate: {100 * report.failure_rate:8.2f}% ({report.verdict})")
    lines.append(f"Score:        {report.score:9.2f}")
    lines += [""] + _title("Validations")
    lines += _layer_lines(report)
    if report.errors:
        lines += [""] + _title("Errors")
        for g in report.errors:
            lines.append(f"{g.bench} [{', '.join(g.tags)}]: {g.line}")
            lines.extend(f"    {ln}" for ln in g.excerpt)
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def render_markdown(report: Report) -> str:
    rows = breakdown_rows(report)
    icon = "✅" if report.verdict == "PASS" and report.exit_code == 0 else "❌"
    out = [f"## {icon} milabench: {report.verdict}, score {report.score:.2f}", ""]
    out.append(
        f"Failure rate **{100 * report.failure_rate:.2f}%** · runs: "
        + ", ".join(f"`{s.name}`" for s in report.sources)
    )
    sysinfo = report.system
    out += [
        "",
        f"System: {sysinfo.get('cpu') or '-'} ({sysinfo.get('n_cpu') or '-'} cpus), "
        f"{sysinfo.get('n_gpu') or 0} x {sysinfo.get('product') or 'no accelerator'}",
        "",
    ]
    out.append("| " + " | ".join(COLUMNS) + " |")
    out.append("|" + "|".join([":---"] + ["---:"] * (len(COLUMNS) - 1)) + "|")
    for r in rows:
        cells = _table_cells(r)
        if r.get("reason"):
            cells[4] = f"— ({r['reason']})"
        out.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    out += ["", "| validation | result |", "|:---|:---|"]
    for layer in report.layers:
        res = "pass" if layer.passed else "**fail**: " + "; ".join(layer.failures)
        if layer.warnings:
            res += " (warnings: " + "; ".join(layer.warnings) + ")"
        out.append(f"| {layer.name} | {_md_escape(res)} |")
    if report.errors:
        out += ["", "<details><summary>Errors</summary>", ""]
        for g in report.errors:
            out.append(f"**{g.bench}** ({', '.join(g.tags)}): `{g.line}`")
            out += ["", "```", *g.excerpt, "```", ""]
        out.append("</details>")
    return "\n".join(out) + "\n"


CSV_FIELDS = [
    "name", "n", "fail", "ngpu", "perf", "std", "sem", "min", "q1", "median", "q3", "max",
    "peak_memory", "mean_load", "energy", "perf_per_watt", "score", "weight", "units", "reason",
]  # fmt: skip


def render_csv(report: Report) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in breakdown_rows(report):
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_FIELDS})
    return buf.getvalue()


def report_dict(report: Report) -> dict[str, Any]:
    return {
        "sources": [str(s) for s in report.sources],
        "system": report.system,
        "benchmarks": breakdown_rows(report),
        "score": report.score,
        "failure_rate": report.failure_rate,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "validations": [
            {
                "name": layer.name,
                "passed": layer.passed,
                "failures": layer.failures,
                "warnings": layer.warnings,
            }
            for layer in report.layers
        ],
        "errors": [
            {"bench": g.bench, "tags": g.tags, "line": g.line, "excerpt": g.excerpt}
            for g in report.errors
        ],
    }


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=2) + "\n"
