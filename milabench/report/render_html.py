"""Self-contained HTML report: tables plus inline SVG plots, no network, no JavaScript.

Plots: per-benchmark bars with error bars (rate +/- its 95% interval, as in the table), and for each benchmark
the throughput over time per process/device, and accelerator load and memory over time
(host CPU load/memory when no accelerator was sampled, e.g. on a CPU-only machine).
"""

from __future__ import annotations

from html import escape

from milabench.report.aggregate import fmt_overhead
from milabench.report.build import Report
from milabench.report.numbers import fmt_pct, fmt_sig
from milabench.report.render_tables import (
    _table_cells,
    breakdown_rows,
    doctor_lines,
    fmt_halfwidth,
    parity_lines,
    system_value,
    table_columns,
    verdict_line,
    warning_lines,
)
from milabench.report.runs import FileResult
from milabench.report.svg import bar_chart, line_chart

STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px}
td.num{text-align:right}th{background:#f3f3f3}.pass{color:#1a7f37}.fail{color:#c62828}
pre{background:#f7f7f7;padding:8px;overflow-x:auto}.plots{display:flex;flex-wrap:wrap;gap:8px}
"""


def _t0(files: list[FileResult]) -> float:
    times = [fr.start_time for fr in files if fr.start_time is not None]
    times += [t for fr in files for t in fr.rate_times if t is not None]
    times += [t for fr in files for t, _ in fr.gpudata + fr.cpudata if t is not None]
    return min(times) if times else 0.0


def _throughput_series(files: list[FileResult], t0: float) -> dict[str, list[tuple[float, float]]]:
    out = {}
    for fr in files:
        pts = [(t - t0, r) for t, r in zip(fr.rate_times, fr.rates, strict=True) if t is not None]
        if not pts and fr.rates:  # untimed records: index as x
            pts = [(float(i), r) for i, r in enumerate(fr.rates)]
        if pts:
            out[fr.tag] = pts
    return out


def _usage_series(files: list[FileResult], t0: float) -> tuple[dict, dict, str]:
    load: dict[str, list[tuple[float, float]]] = {}
    mem: dict[str, list[tuple[float, float]]] = {}
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


def render_html(report: Report) -> str:
    rows = breakdown_rows(report)
    ok = report.exit_code == 0
    h = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>milabench report: {escape(report.verdict)}</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>milabench report</h1>",
        f'<p class="verdict {"pass" if ok else "fail"}"><b>{escape(verdict_line(report))}</b>: '
        f"failure rate {fmt_pct(100 * report.failure_rate)}, score {fmt_sig(report.score)}</p>",
        "<p>Sources: "
        + ", ".join(f"<code>{escape(str(s))}</code>" for s in report.sources)
        + "</p>",
    ]
    if report.verdict_reasons:
        h.append('<ul class="reasons fail">')
        h += [f"<li>{escape(reason)}</li>" for reason in report.verdict_reasons]
        h.append("</ul>")
    h.append("<h2>System</h2><table>")
    for key in ("cpu", "n_cpu", "product", "n_gpu", "memory", "hostname", "build"):
        h.append(
            f"<tr><th>{key}</th><td>{escape(system_value(key, report.system.get(key)))}</td></tr>"
        )
    h += ["</table>", '<h2>Breakdown</h2><table class="breakdown"><tr>']
    columns = table_columns(rows)
    h += [f"<th>{escape(c)}</th>" for c in columns] + ["<th>reason</th></tr>"]
    for r in rows:
        cells = _table_cells(r, columns)
        h.append(
            "<tr>"
            + f"<td>{escape(cells[0])}</td>"
            + "".join(f'<td class="num">{escape(c)}</td>' for c in cells[1:])
            + f"<td>{escape(r.get('reason') or '')}</td></tr>"
        )
    h.append("</table>")
    warnings = warning_lines(report)
    if warnings:
        h.append('<h2>Warnings</h2><ul class="warnings">')
        h += [f"<li>{escape(w)}</li>" for w in warnings]
        h.append("</ul>")
    different = parity_lines(report)
    if different:
        h.append('<h2>Not comparable with upstream milabench</h2><ul class="warnings">')
        h += [f"<li>{escape(d)}</li>" for d in different]
        h.append("</ul>")
    machine = doctor_lines(report)
    if machine:
        h.append('<h2>Machine at the start (milabench doctor)</h2><ul class="warnings">')
        h += [f"<li>{escape(m)}</li>" for m in machine]
        h.append("</ul>")
    bars = [(br.name, br.raw_rate, _ci_half(br)) for br in report.benchmarks if br.summary]
    h += ['<div class="plots">', bar_chart("Rate per benchmark (± 95% interval)", bars,
                                            ylabel="rate", css="plot-bars"), "</div>"]  # fmt: skip
    h.append("<h2>Validations</h2><ul>")
    for layer in report.layers:
        cls = "pass" if layer.passed else "fail"
        items = "".join(f"<li>{escape(m)}</li>" for m in layer.failures)
        items += "".join(f"<li>warning: {escape(m)}</li>" for m in layer.warnings)
        state = "passed" if layer.passed else "failed"
        h.append(f'<li class="{cls}">{escape(layer.name)}: {state}<ul>{items}</ul></li>')
    h.append("</ul>")
    if report.errors:
        h.append("<h2>Errors</h2>")
        for g in report.errors:
            h.append(
                f"<h3>{escape(g.bench)} <small>({escape(', '.join(g.tags))})</small></h3>"
                f"<p><code>{escape(g.line)}</code></p><pre>{escape(chr(10).join(g.excerpt))}</pre>"
            )
    h.append("<h2>Benchmarks</h2>")
    for br in report.benchmarks:
        files = [fr for fr in br.files if br.statuses.get(fr.tag) != "skipped"]
        if not files or br.phase != "run":
            continue
        t0 = _t0(files)
        load, mem, source = _usage_series(files, t0)
        units = br.units or "rate"
        h.append(
            f'<h3 id="bench-{escape(br.name)}">{escape(br.name)}</h3>'
            f"<p>perf {fmt_sig(br.perf)} {escape(units)} (95% interval "
            f"{escape(fmt_halfwidth(br.halfwidth))}, {br.observations:,} observations"
            + (f", overhead {fmt_overhead(br.overhead)}" if br.overhead is not None else "")
            + f"), score {fmt_sig(br.score)}"
            + (f", reason: {escape(br.reason)}" if br.reason else "")
            + '</p><div class="plots">'
        )
        h.append(line_chart(f"{br.name}: throughput per device", _throughput_series(files, t0),
                            ylabel=units, css="plot-throughput"))  # fmt: skip
        h.append(line_chart(f"{br.name}: {source} load (%)", load, ylabel="load %",
                            css="plot-load"))  # fmt: skip
        h.append(line_chart(f"{br.name}: {source} memory (MiB)", mem, ylabel="MiB",
                            css="plot-memory"))  # fmt: skip
        h.append("</div>")
    h.append("</body></html>")
    return "\n".join(h) + "\n"


def _ci_half(br) -> float:
    """Absolute half-width of the benchmark's 95% interval (0 when it has none)."""
    if br.ci_low is None or br.ci_high is None:
        return 0.0
    return (br.ci_high - br.ci_low) / 2
