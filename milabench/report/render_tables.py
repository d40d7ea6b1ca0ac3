"""Text, Markdown, CSV and JSON renderings of a `Report`.

All of them start from `breakdown_rows`, so the numbers are the same in every format.
People read numbers through `numbers.fmt_sig` (3 significant digits, never "0.0");
CSV and JSON keep full precision. Every format carries the verdict with its reasons and
how good each figure is (observations, warm-up, measured time, 95% interval, target).
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

from milabench.report.aggregate import fmt_overhead
from milabench.report.build import Report
from milabench.report.upstream import (
    UPSTREAM_WEIGHTED,
    RateComparison,
    comparability,
    rate_comparison,
    stand_in_reason,
)
from milabench.rundata.numbers import MISSING, fmt_bytes, fmt_pct, fmt_seconds, fmt_sig

COLUMNS = [
    "bench", "fail", "n", "ngpu", "perf", "95% CI", "obs", "warm-up", "measured", "target",
    "sem%", "std%", "peak RSS", "peak acc mem", "score", "weight",
]  # fmt: skip
PERF = COLUMNS.index("perf")
# Benchmarks measured from outside (voirfile) say what their instrumentation cost; the
# column (after "measured") is shown only when some row has that figure.
OVERHEAD_COLUMN = "overhead"
_OVERHEAD_AT = COLUMNS.index("measured") + 1


def _num(x: float | None) -> float | None:
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return None
    return x


def breakdown_rows(report: Report) -> list[dict[str, Any]]:
    """One JSON-able dict per benchmark (the JSON `benchmarks` list), full precision."""
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
            "rate": _num(br.raw_rate),  # the benchmark's rate (per_gpu: sum over devices)
            "std": _num(s.std_pct) if s else None,
            "sem": _num(s.sem_pct) if s else None,
            "score": _num(br.score) if s else None,  # no value, no score (`reason`)
            "weight": br.effective_weight,
            "units": br.units,
            "enabled": br.enabled,
            "observations": br.observations,
            "warmup_s": _num(br.warmup_s),
            "measured_s": _num(br.measured_s),
            "median": _num(s.median) if s else None,
            "ci95_low": _num(br.ci_low),
            "ci95_high": _num(br.ci_high),
            "halfwidth": _num(br.halfwidth),
            "target": _num(br.target),
            "target_met": br.target_met,
            "min_observations": br.min_observations,
            "peak_rss": _num(br.peak_rss),
            "peak_memory": _num(br.peak_memory),
            "memory_estimate": _num(br.memory_estimate),
            "torch_peak_allocated": _num(br.torch_peak_allocated),
            "torch_peak_reserved": _num(br.torch_peak_reserved),
            "torch_alloc_retries": br.torch_alloc_retries,
            "torch_ooms": br.torch_ooms,
            "mean_load": br.mean_load,
            "energy": br.energy,
            "energy_source": br.energy_source,
            "mean_power": _num(br.mean_power),
            "perf_per_watt": br.perf_per_watt,
            "items_per_joule": br.perf_per_watt,  # (items/s) / W = items / J
            "flops_per_item": br.flops_per_item,
            "flops_precision": br.flops_precision,
            "flops_source": br.flops_source,
            "tflops": _num(br.tflops),
            "tflops_ci95_low": _num(br.tflops_low),
            "tflops_ci95_high": _num(br.tflops_high),
            "accelerator": br.product,
            "peak_tflops": _num(br.peak_tflops),
            "mfu": _num(br.mfu),
            "samples": len(br.samples),
            "warnings": list(br.warnings),
            "parity": br.parity,
        }
        if br.hardware_flops_per_item is not None:  # declared beside the model FLOPs
            row["hardware_flops_per_item"] = br.hardware_flops_per_item
            row["hardware_tflops"] = _num(br.hardware_tflops)
            row["hfu"] = _num(br.hfu)
        if br.interference is not None:  # runs that recorded interference samples
            row["interference"] = br.interference_text
            row["interference_detail"] = br.interference
        if br.target_unreachable:
            row["target_unreachable"] = True
        if br.overhead is not None:  # voirfile benchmarks only: no key for the others
            row["overhead"] = _num(br.overhead)
            row["overhead_per_step_s"] = _num(br.overhead_per_step_s)
        if s:
            row.update({"min": s.min, "q1": s.q1, "q3": s.q3, "max": s.max})
        if br.reason:
            row["reason"] = br.reason
        rows.append(row)
    return rows


def fmt_halfwidth(halfwidth: float | None) -> str:
    """A relative half-width as the table shows it: 0.0151 -> "±1.51%"."""
    text = fmt_pct(None if halfwidth is None else 100.0 * halfwidth)
    return text if text == MISSING else f"±{text}"


def _target_cell(row: dict[str, Any]) -> str:
    if row.get("target_unreachable"):
        return "unreachable"
    met = row.get("target_met")
    return MISSING if met is None else ("met" if met else "missed")


def has_overhead(rows: list[dict[str, Any]]) -> bool:
    """Some row carries an instrumentation overhead (then the tables show the column)."""
    return any(r.get("overhead") is not None for r in rows)


def has_flops(rows: list[dict[str, Any]]) -> bool:
    """Some row declared its FLOPs (then the tables show TFLOPS and MFU)."""
    return any(r.get("tflops") is not None for r in rows)


def has_hardware_flops(rows: list[dict[str, Any]]) -> bool:
    """Some row declared hardware FLOPs beside its model FLOPs (then HFU is shown)."""
    return any(r.get("hardware_tflops") is not None for r in rows)


def has_energy(rows: list[dict[str, Any]]) -> bool:
    """Some row has an energy figure (a monitor reported power or an energy counter)."""
    return any(r.get("energy") is not None or r.get("items_per_joule") for r in rows)


# Columns shown only when some row has the figure, inserted before "score" so the
# scored columns stay last; a CPU-only report keeps its width.
EFFICIENCY_COLUMNS = ["TFLOPS", "MFU"]
ENERGY_COLUMNS = ["energy", "items/J"]
# Hardware FLOPs utilisation (recomputation included) beside the MFU, when declared.
HFU_COLUMN = "HFU"


# What the rest of the machine did during the window (docs/doctor.md): after "target",
# shown when some row recorded it (runs made before it existed keep their width).
INTERFERENCE_COLUMN = "interference"


def has_interference(rows: list[dict[str, Any]]) -> bool:
    return any(r.get("interference") is not None for r in rows)


def table_columns(rows: list[dict[str, Any]]) -> list[str]:
    """`COLUMNS`, with `overhead` after `measured` when some row has one, and the
    efficiency (TFLOPS, MFU) and energy (energy, items/J) columns when some row has them."""
    columns = list(COLUMNS)
    if has_overhead(rows):
        columns.insert(_OVERHEAD_AT, OVERHEAD_COLUMN)
    if has_interference(rows):
        columns.insert(columns.index("target") + 1, INTERFERENCE_COLUMN)
    at = columns.index("score")
    extra = (
        (EFFICIENCY_COLUMNS if has_flops(rows) else [])
        + ([HFU_COLUMN] if has_hardware_flops(rows) else [])
        + (ENERGY_COLUMNS if has_energy(rows) else [])
    )
    return columns[:at] + extra + columns[at:]


def fmt_mfu(mfu: float | None) -> str:
    """0.412 -> "41.2%"."""
    return fmt_pct(None if mfu is None else 100.0 * mfu)


def fmt_energy(joules: float | None) -> str:
    """Joules for people: "812 J", "45.1 kJ", "3.2 MJ"."""
    if joules is None:
        return MISSING
    for unit, scale in (("MJ", 1e6), ("kJ", 1e3)):
        if abs(joules) >= scale:
            return f"{fmt_sig(joules / scale)} {unit}"
    return f"{fmt_sig(joules)} J"


def table_cells(row: dict[str, Any], columns: list[str] | None = None) -> list[str]:
    """The table's cells of one row, in the order of ``columns`` (`table_columns`; the
    base `COLUMNS` when None): every number through `numbers.fmt_sig` (3 digits)."""
    mem = row["peak_memory"]  # MiB
    cells = {
        "bench": row["name"],
        "fail": str(row["fail"]),
        "n": str(row["n"]),
        "ngpu": str(row["ngpu"]),
        "perf": fmt_sig(row["perf"]),
        "95% CI": fmt_halfwidth(row["halfwidth"]),
        "obs": f"{row['observations']:,}" if row["observations"] else MISSING,
        "warm-up": fmt_seconds(row["warmup_s"]),
        "measured": fmt_seconds(row["measured_s"]),
        OVERHEAD_COLUMN: fmt_overhead(row.get("overhead")),
        "target": _target_cell(row),
        INTERFERENCE_COLUMN: row.get("interference") or MISSING,
        "sem%": fmt_pct(row["sem"]),
        "std%": fmt_pct(row["std"]),
        "peak RSS": fmt_bytes(row["peak_rss"]),
        "peak acc mem": fmt_bytes(None if mem is None else mem * 2**20),
        "TFLOPS": fmt_sig(row.get("tflops")),
        "MFU": fmt_mfu(row.get("mfu")),
        HFU_COLUMN: fmt_mfu(row.get("hfu")),
        "energy": fmt_energy(row.get("energy")),
        "items/J": fmt_sig(row.get("items_per_joule")),
        "score": fmt_sig(row["score"]),
        "weight": fmt_sig(row["weight"]),
    }
    return [cells[c] for c in (columns or COLUMNS)]


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


def system_value(key: str, value: Any) -> str:
    """A System field for people (accelerator memory is in MiB in the metadata)."""
    if value is None:
        return MISSING
    if key == "memory" and isinstance(value, int | float):
        return fmt_bytes(value * 2**20)
    return str(value)


def score_text(report: Report) -> str:
    """The suite score for people, or a dash and why there is none: ``- (no benchmark
    succeeded (3 failed))``; never the formula's 1 for a run that measured nothing."""
    if report.score is None:
        return f"{MISSING} ({report.score_reason or 'nothing measured'})"
    return fmt_sig(report.score)


def verdict_line(report: Report) -> str:
    """``PASS (exit code 0)`` / ``FAIL (exit code 1)``: both from one `run_verdict` call."""
    return f"{report.verdict} (exit code {report.exit_code})"


def warning_lines(report: Report) -> list[str]:
    """Every measurement warning as ``bench: sentence`` (warnings never fail a run)."""
    return [f"{name}: {text}" for name, text in report.warnings]


def comparison_headline(report: Report) -> str | None:
    """``14 of 25 comparable with upstream milabench v1.3.2``: how many of upstream's
    weighted entries this run measured with upstream's work and inputs; None when the
    run holds none of them (`milabench.report.upstream`)."""
    comp = comparability(report.benchmarks)
    return comp.headline() if comp is not None else None


def rates_against_upstream(report: Report) -> RateComparison | None:
    """The run's rates against upstream's figures on its GPU's family
    (`milabench.report.upstream.rate_comparison`); None without one."""
    return rate_comparison(report.benchmarks, report.system.get("product"))


def rate_lines(report: Report) -> list[str]:
    """The heading and one line per entry of `rates_against_upstream`; [] without."""
    found = rates_against_upstream(report)
    return found.lines({br.name: br.units for br in report.benchmarks}) if found else []


def parity_lines(report: Report) -> list[str]:
    """``bench: reason`` for each of upstream's weighted entries that is not comparable
    (those not in the run on one line), the `-gpus` entries that ran on one GPU, and any
    other entry that does other work than upstream's entry of the same name (its
    ``parity: "different: ..."``) or ran a stand-in (docs/parity.md, docs/inputs.md)."""
    comp = comparability(report.benchmarks)
    out: list[str] = []
    listed: set[str] = set()
    if comp is not None:
        absent = [name for name, reason in comp.others if reason == "not in this run"]
        for name, reason in comp.others:
            if reason != "not in this run":
                out.append(f"{name}: {reason}")
        if absent:
            out.append("not in this run: " + ", ".join(absent))
        if comp.one_gpu:
            out.append(
                "ran on 1 GPU (as upstream runs them on a 1-GPU node): " + ", ".join(comp.one_gpu)
            )
        listed = {name for name, _ in comp.others}
    for br in report.benchmarks:
        if br.name in listed or br.name in UPSTREAM_WEIGHTED:
            continue
        if br.parity and br.parity.lower().startswith("different"):
            reason = br.parity.partition(":")[2].strip() or "different work"
            out.append(f"{br.name}: {reason}")
        elif stand_in_reason(br.inputs):
            out.append(f"{br.name}: {stand_in_reason(br.inputs)}")
    return out


def doctor_lines(report: Report) -> list[str]:
    """The machine's problems when the run started (`milabench doctor`'s warnings and
    failures, ``severity: subject check: reason``), then how many checks were ok; [] for
    a run without a ``doctor.json``. Runs of several folders prefix the folder name."""
    if not report.doctor:
        return []
    several = len({run for run, _ in report.doctor}) > 1
    lines = []
    for run, f in report.doctor:
        if f.severity != "ok":
            where = f"{run}: " if several else ""
            lines.append(f"{where}{f.severity}: {f.subject} {f.check}: {f.reason}")
    ok = sum(f.severity == "ok" for _, f in report.doctor)
    lines.append(f"{ok} of {len(report.doctor)} checks ok (milabench doctor)")
    return lines


def render_text(report: Report) -> str:
    rows = breakdown_rows(report)
    lines = [f"Source: {src}" for src in report.sources]
    lines += ["=" * 17, "Benchmark results", "=" * 17, ""]
    lines += _title("System")
    for key in ("cpu", "n_cpu", "product", "n_gpu", "memory", "build"):
        lines.append(f"{key + ':':<10}{system_value(key, report.system.get(key))}")
    lines += [""] + _title("Breakdown")
    columns = table_columns(rows)
    cells = [columns] + [table_cells(r, columns) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    for c in cells:
        parts = [c[0].ljust(widths[0])] + [
            v.rjust(w) for v, w in zip(c[1:], widths[1:], strict=True)
        ]
        lines.append(" | ".join(parts))
    missing = [r for r in rows if r.get("reason")]
    if missing:
        lines += ["", "Missing values:"]
        lines += [f"  {r['name']}: {r['reason']}" for r in missing]
    warnings = warning_lines(report)
    if warnings:
        lines += [""] + _title("Warnings")
        lines += [f"  ~ {w}" for w in warnings]
    headline, different = comparison_headline(report), parity_lines(report)
    rates = rate_lines(report)
    if headline or different or rates:
        lines += [""] + _title("Comparison with upstream milabench")
        lines += [f"  {headline}"] if headline else []
        lines += [f"  ≠ {d}" for d in different]
        lines += [f"  {rates[0]}"] + [f"    {r}" for r in rates[1:]] if rates else []
    machine = doctor_lines(report)
    if machine:
        lines += [""] + _title("Machine at the start")
        lines += [f"  {ln}" for ln in machine]
    lines += [""] + _title("Scores")
    lines.append(f"Failure rate: {fmt_pct(100 * report.failure_rate)} ({report.verdict})")
    lines.append(f"Score:        {score_text(report)}")
    lines.append(f"Verdict:      {verdict_line(report)}")
    lines.extend(f"  - {reason}" for reason in report.verdict_reasons)
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
    icon = "✅" if report.exit_code == 0 else "❌"
    out = [f"## {icon} milabench: {report.verdict}, score {_md_escape(score_text(report))}", ""]
    out.append(
        f"Verdict **{verdict_line(report)}** · failure rate "
        f"**{fmt_pct(100 * report.failure_rate)}** · runs: "
        + ", ".join(f"`{s.name}`" for s in report.sources)
    )
    if report.verdict_reasons:
        out.append("")
        out.extend(f"* {_md_escape(reason)}" for reason in report.verdict_reasons)
    sysinfo = report.system
    out += [
        "",
        f"System: {sysinfo.get('cpu') or '-'} ({sysinfo.get('n_cpu') or '-'} cpus), "
        f"{sysinfo.get('n_gpu') or 0} x {sysinfo.get('product') or 'no accelerator'}"
        + (f", build {sysinfo['build']}" if sysinfo.get("build") else ""),
        "",
    ]
    columns = table_columns(rows)
    out.append("| " + " | ".join(columns) + " |")
    out.append("|" + "|".join([":---"] + ["---:"] * (len(columns) - 1)) + "|")
    for r in rows:
        cells = table_cells(r, columns)
        if r.get("reason"):
            cells[PERF] = f"— ({r['reason']})"
        out.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    warnings = warning_lines(report)
    if warnings:
        out += ["", "**Warnings**", ""]
        out.extend(f"* {_md_escape(w)}" for w in warnings)
    headline, different = comparison_headline(report), parity_lines(report)
    rates = rate_lines(report)
    if headline or different or rates:
        out += ["", "**Comparison with upstream milabench** (docs/parity.md)", ""]
        out += [_md_escape(headline), ""] if headline else []
        out.extend(f"* {_md_escape(d)}" for d in different)
        if rates:
            out += ["", _md_escape(rates[0]), ""]
            out.extend(f"* {_md_escape(r)}" for r in rates[1:])
    machine = doctor_lines(report)
    if machine:
        out += ["", "**Machine at the start** (milabench doctor)", ""]
        out.extend(f"* {_md_escape(ln)}" for ln in machine)
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
    "name", "n", "fail", "ngpu", "perf", "rate", "std", "sem", "min", "q1", "median", "q3",
    "max", "observations", "warmup_s", "measured_s", "ci95_low", "ci95_high", "halfwidth",
    "target", "target_met", "min_observations", "peak_rss", "peak_memory", "mean_load", "energy",
    "energy_source", "mean_power", "perf_per_watt", "items_per_joule", "flops_per_item",
    "flops_precision", "flops_source", "tflops", "tflops_ci95_low", "tflops_ci95_high",
    "accelerator", "peak_tflops", "mfu", "score", "weight", "units", "warnings", "reason",
    "parity",
]  # fmt: skip
# Appended (last) only when some row has an overhead: other reports keep their columns.
CSV_OVERHEAD_FIELDS = ["overhead", "overhead_per_step_s"]
# Appended only when some row declared hardware FLOPs beside its model FLOPs.
CSV_HARDWARE_FIELDS = ["hardware_flops_per_item", "hardware_tflops", "hfu"]
# Appended only when some row recorded its start-up memory estimate (MiB, as peak_memory).
CSV_ESTIMATE_FIELDS = ["memory_estimate"]
# Appended only when some process recorded torch's own peaks (`benchkit.devicemem`; MiB,
# as peak_memory), with the allocator's retries and caught out-of-memory errors.
CSV_TORCH_MEMORY_FIELDS = [
    "torch_peak_allocated", "torch_peak_reserved", "torch_alloc_retries", "torch_ooms",
]  # fmt: skip
# Appended only when some row recorded interference samples.
CSV_INTERFERENCE_FIELDS = ["interference", "target_unreachable"]


def has_torch_memory(row: dict[str, Any]) -> bool:
    """The row carries torch's own peak memory (some process recorded it)."""
    return row.get("torch_peak_allocated") is not None or row.get("torch_peak_reserved") is not None


def _csv_value(value: Any) -> Any:
    """Full precision; booleans as true/false, lists (warnings) joined with "; "."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "; ".join(str(v) for v in value)
    return value


def render_csv(report: Report) -> str:
    buf = io.StringIO()
    rows = breakdown_rows(report)
    fields = CSV_FIELDS + (CSV_OVERHEAD_FIELDS if has_overhead(rows) else [])
    fields += CSV_HARDWARE_FIELDS if has_hardware_flops(rows) else []
    fields += CSV_INTERFERENCE_FIELDS if has_interference(rows) else []
    fields += CSV_ESTIMATE_FIELDS if any(r.get("memory_estimate") is not None for r in rows) else []
    fields += CSV_TORCH_MEMORY_FIELDS if any(has_torch_memory(r) for r in rows) else []
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(row.get(k)) for k in fields})
    return buf.getvalue()


# Version of the report JSON (docs/reports.md "Formats and versions"): 1 = reports without
# the `schema_version` key (written before versioning), 2 = the key is written.
REPORT_SCHEMA_VERSION = 2


def report_dict(report: Report) -> dict[str, Any]:
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "sources": [str(s) for s in report.sources],
        "system": report.system,
        "benchmarks": breakdown_rows(report),
        "score": report.score,  # null when nothing weighted was measured
        "score_reason": report.score_reason,
        "failure_rate": report.failure_rate,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "verdict_reasons": report.verdict_reasons,
        "warnings": [{"bench": name, "message": text} for name, text in report.warnings],
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
        "doctor": [{"run": run, **f.as_dict()} for run, f in report.doctor],
        # upstream's weighted entries this run can be compared on (null: none in the run)
        "upstream": _upstream_dict(report),
    }


def _upstream_dict(report: Report) -> dict[str, Any] | None:
    """Comparability (`comparability`), and ``rates`` against upstream's figures on the
    run's GPU family when there are some; None when neither applies."""
    comp = comparability(report.benchmarks)
    rates = rates_against_upstream(report)
    if comp is None and rates is None:
        return None
    out = comp.as_dict() if comp is not None else {}
    if rates is not None:
        out["rates"] = rates.as_dict()
    return out


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=2) + "\n"


def check_report_schema(data: Any, source: object) -> dict[str, Any]:
    """A report JSON read back (`source` names it): refused when newer than this reader.

    Reports without `schema_version` are version 1; every version up to
    `REPORT_SCHEMA_VERSION` is accepted. The error is one line (`UsageError`, exit 2).
    """
    from milabench.errors import UsageError

    if not isinstance(data, dict):
        raise UsageError(f"{source}: not a milabench report (a JSON object is expected)")
    from milabench.events import check_version

    check_version(data.get("schema_version", 1), REPORT_SCHEMA_VERSION, source)
    return data


def load_report_json(path: Any) -> dict[str, Any]:
    """Read a report JSON file (`milabench report --format json`, a run's `report.json`)."""
    from pathlib import Path

    from milabench.errors import UsageError

    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    return check_report_schema(data, path)
