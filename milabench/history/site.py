"""The history site: static HTML pages with inline SVG, readable from file:// offline.

* ``index.html``: one row per series (benchmark, machine, suite) with its latest value and
  95% interval, a sparkline and the trend over the last runs, and its open alerts; then
  every alert.
* ``bench-<name>.html``: the rate over time (x = run date, or commit), one series per
  machine and suite, intervals as error bars, change points as vertical lines labelled
  ``-10.2% at run X``, and the table of change points.

Filters (machine, suite, tag; per-series check boxes on a benchmark page) are a few lines
of inline JavaScript that hide elements of class ``filterable`` by their ``data-*``
attributes; the page asks for nothing over the network. A filter can be preset in the
address: ``index.html#machine=gpu01&tag=nlp``. Every data point is a
``<circle class="point" data-run=... data-value=...>``.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import re
from html import escape
from pathlib import Path

from milabench.history.series import Change, Series, fmt_num, short_date, trend
from milabench.report.svg import PALETTE, _fmt, _ticks

W, H = 960, 380
ML, MR, MT, MB = 78, 24, 34, 58

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.filters { margin: 0.8em 0; padding: 0.5em; background: #f6f6f6; }
.filters label { margin-right: 1.2em; }
.alert { color: #b00020; font-weight: bold; } .good { color: #1b7f2a; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: middle; }
.muted { color: #777; } a { color: #1f5fa8; }
"""

JS = """
(function () {
  var names = ["machine", "suite", "tag"];
  function get(name) {
    var el = document.getElementById("filter-" + name);
    return el ? el.value : "";
  }
  function apply() {
    var hidden = {};
    document.querySelectorAll("input.series-toggle").forEach(function (box) {
      if (!box.checked) { hidden[box.getAttribute("data-key")] = true; }
    });
    var machine = get("machine"), suite = get("suite"), tag = get("tag"), shown = 0;
    document.querySelectorAll(".filterable").forEach(function (el) {
      var ok = true;
      if (machine && el.getAttribute("data-machine") !== machine) { ok = false; }
      if (suite && el.getAttribute("data-suite") !== suite) { ok = false; }
      if (tag && (el.getAttribute("data-tags") || "").split(",").indexOf(tag) < 0) { ok = false; }
      var key = el.getAttribute("data-key");
      if (key !== null && hidden[key]) { ok = false; }
      el.style.display = ok ? "" : "none";
      if (ok && el.classList.contains("series-row")) { shown += 1; }
    });
    var count = document.getElementById("shown-count");
    if (count) { count.textContent = String(shown); }
  }
  var preset = {};
  location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
    var i = kv.indexOf("=");
    if (i > 0) { preset[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1)); }
  });
  names.forEach(function (name) {
    var el = document.getElementById("filter-" + name);
    if (!el) { return; }
    if (preset[name] !== undefined) {
      el.value = preset[name];
      if (el.value !== preset[name]) {  // a value with no data: keep it, show nothing
        var opt = document.createElement("option");
        opt.value = preset[name];
        opt.textContent = preset[name] + " (no data)";
        el.appendChild(opt);
        el.value = preset[name];
      }
    }
    el.addEventListener("change", apply);
  });
  document.querySelectorAll("input.series-toggle").forEach(function (box) {
    box.addEventListener("change", apply);
  });
  apply();
  document.body.setAttribute("data-ready", "1");
})();
"""


def slug(bench: str) -> str:
    """File name of a benchmark's page (a hash keeps names that differ apart)."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", bench).strip("._")
    if clean != bench:
        clean += "-" + hashlib.sha1(bench.encode()).hexdigest()[:8]
    return f"bench-{clean}.html"


def _attr(text: str | None) -> str:
    return escape(text or "?", quote=True)


def _page(title: str, body: list[str]) -> str:
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>", f"<style>{CSS}</style>", "</head><body>",
        *body, f"<script>{JS}</script>", "</body></html>", "",
    ])  # fmt: skip


def _filters(series: list[Series], with_toggles: bool) -> list[str]:
    def select(name: str, values: list[str]) -> str:
        opts = ['<option value="">all</option>'] + [
            f'<option value="{_attr(v)}">{escape(v)}</option>' for v in values
        ]
        return f'<label>{name} <select id="filter-{name}">{"".join(opts)}</select></label>'

    machines = sorted({s.machine or "?" for s in series})
    suites = sorted({s.suite or "?" for s in series})
    tags = sorted({t for s in series for t in s.tags})
    out = ['<div class="filters">', select("machine", machines), select("suite", suites),
           select("tag", tags)]  # fmt: skip
    if with_toggles:
        out.append("<br>series: ")
        for i, s in enumerate(series):
            color = PALETTE[i % len(PALETTE)]
            out.append(
                f'<label><input type="checkbox" class="series-toggle" data-key="{_attr(s.key)}" '
                f'checked> <span class="swatch" style="background:{color}"></span> '
                f"{escape(s.key)}</label>"
            )
    out.append("</div>")
    return out


def _data(s: Series) -> str:
    """The data-* attributes the filters read."""
    return (f'data-key="{_attr(s.key)}" data-machine="{_attr(s.machine)}" '
            f'data-suite="{_attr(s.suite)}" data-tags="{_attr(",".join(s.tags))}"')  # fmt: skip


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100.0 * x:+.1f}%"


def _interval(lo: float | None, hi: float | None) -> str:
    return f"[{fmt_num(lo)}, {fmt_num(hi)}]" if lo is not None and hi is not None else ""


# --- the benchmark chart --------------------------------------------------------------


def chart(bench: str, series: list[Series], *, x_axis: str = "date") -> str:
    """Rate over time, one series per machine/suite, with intervals and change points."""
    pts = [p for s in series for p in s.points]
    if not pts:
        return '<svg class="plot plot-history empty" width="10" height="10"></svg>'
    pw, ph = W - ML - MR, H - MT - MB
    if x_axis == "commit":
        order: list[str] = []
        for p in sorted(pts, key=lambda p: p.started or 0.0):
            k = _commit_key(p)
            if k not in order:
                order.append(k)
        slot = {k: i for i, k in enumerate(order)}

        def px(p) -> float:
            return ML + (slot[_commit_key(p)] + 0.5) * pw / len(order)

        stride = max(1, math.ceil(len(order) / 12))
        xticks = [(ML + (i + 0.5) * pw / len(order), k[:10]) for i, k in enumerate(order)
                  if i % stride == 0]  # fmt: skip
        xlabel = "commit"
    else:
        times = [p.started or 0.0 for p in pts]
        ta, tb = min(times), max(times)
        span = tb - ta or 1.0
        t0, t1 = ta - 0.03 * span, tb + 0.03 * span

        def px(p) -> float:
            return ML + ((p.started or 0.0) - t0) / (t1 - t0) * pw

        fmt = "%Y-%m-%d" if span > 3 * 86400 else "%m-%d %H:%M:%S" if span < 600 else "%m-%d %H:%M"
        xticks = [(ML + (t - t0) / (t1 - t0) * pw,
                   datetime.datetime.fromtimestamp(t, datetime.UTC).strftime(fmt))
                  for t in _ticks(ta, tb)]  # fmt: skip
        xlabel = "run date (UTC)"
    lows = [p.ci_low if p.ci_low is not None else p.value for p in pts]
    highs = [p.ci_high if p.ci_high is not None else p.value for p in pts]
    y0, y1 = min(lows), max(highs)
    pad = 0.08 * (y1 - y0) if y1 > y0 else 0.05 * abs(y1) or 1.0
    y0, y1 = y0 - pad, y1 + pad

    def py(v: float) -> float:
        return MT + ph - (v - y0) / (y1 - y0) * ph

    units = next((s.units for s in series if s.units), None) or "rate"
    body = [
        f'<svg class="plot plot-history" xmlns="http://www.w3.org/2000/svg" width="{W}" '
        f'height="{H}" viewBox="0 0 {W} {H}" role="img" data-bench="{_attr(bench)}">',
        f"<title>{escape(bench)}: {escape(units)} per run</title>",
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>',
        f'<line x1="{ML}" y1="{MT + ph}" x2="{ML + pw}" y2="{MT + ph}" stroke="#444"/>',
        f'<line x1="{ML}" y1="{MT}" x2="{ML}" y2="{MT + ph}" stroke="#444"/>',
        f'<text x="14" y="{MT + ph / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 14 {MT + ph / 2})">{escape(units)}</text>',
        f'<text x="{ML + pw / 2}" y="{H - 6}" font-size="11" text-anchor="middle">{xlabel}</text>',
    ]
    for t in _ticks(y0, y1):
        body.append(
            f'<line x1="{ML}" y1="{py(t):.1f}" x2="{ML + pw}" y2="{py(t):.1f}" stroke="#eee"/>'
            f'<text x="{ML - 4}" y="{py(t) + 4:.1f}" font-size="10" text-anchor="end">'
            f"{_fmt(t, (y1 - y0) / 4)}</text>"
        )
    for x, label in xticks:
        body.append(
            f'<text x="{x:.1f}" y="{MT + ph + 14}" font-size="10" text-anchor="end" '
            f'transform="rotate(-20 {x:.1f} {MT + ph + 14})">{escape(label)}</text>'
        )
    label_row = 0
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        body.append(f'<g class="series-group filterable" {_data(s)}>')
        xy = [(px(p), py(p.value)) for p in s.points]
        body.append(
            f'<polyline class="series" data-label="{_attr(s.key)}" fill="none" stroke="{color}" '
            f'stroke-width="1.2" points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}"/>'
        )
        for p, (x, y) in zip(s.points, xy, strict=True):
            if p.ci_low is not None and p.ci_high is not None:
                body.append(
                    f'<line class="errorbar" x1="{x:.1f}" y1="{py(p.ci_low):.1f}" x2="{x:.1f}" '
                    f'y2="{py(p.ci_high):.1f}" stroke="{color}" stroke-opacity="0.6"/>'
                )
            tip = (f"{p.run} ({short_date(p.started)}, {(p.commit or '-')[:10]}): "
                   f"{fmt_num(p.value)} {_interval(p.ci_low, p.ci_high)}")  # fmt: skip
            body.append(
                f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}" '
                f'data-run="{_attr(p.run)}" data-value="{p.value!r}" '
                f'data-date="{_attr(short_date(p.started))}" data-commit="{_attr(p.commit)}">'
                f"<title>{escape(tip)}</title></circle>"
            )
        for cp in s.changes:
            first = s.points[cp.index]
            x = (xy[cp.index - 1][0] + xy[cp.index][0]) / 2 if cp.index > 0 else xy[0][0]
            cls = "changepoint regression" if cp.regression else "changepoint improvement"
            stroke = color  # the series' colour: which series changed
            text = f"{100.0 * cp.change:+.1f}% at run {first.run}"
            ly = MT + 12 + 13 * (label_row % 6)
            label_row += 1
            anchor, dx = ("end", -4) if x > ML + pw * 0.6 else ("start", 4)
            body.append(
                f'<line class="{cls}" x1="{x:.1f}" y1="{MT}" x2="{x:.1f}" y2="{MT + ph}" '
                f'stroke="{stroke}" stroke-dasharray="5,3" data-run="{_attr(first.run)}"/>'
                f'<text class="changepoint-label" x="{x + dx:.1f}" y="{ly}" font-size="11" '
                f'text-anchor="{anchor}" fill="{stroke}">{escape(text)}</text>'
            )
        body.append("</g>")
    body.append("</svg>")
    return "\n".join(body)


def _commit_key(p) -> str:
    return p.commit or f"run {p.run}"


def sparkline(s: Series, last: int) -> str:
    values = [p.value for p in s.points[-last:]]
    w, h, m = 120, 28, 3
    lo, hi = min(values), max(values)
    mid = (lo + hi) / 2
    floor = 0.04 * abs(mid)  # a band of at least +-2%: run-to-run noise stays flat
    if hi - lo < floor:
        lo, hi = mid - floor / 2, mid + floor / 2
    rng = hi - lo or 1.0
    step = (w - 2 * m) / max(len(values) - 1, 1)
    xy = [(m + i * step, h - m - (v - lo) / rng * (h - 2 * m)) for i, v in enumerate(values)]
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    lx, ly = xy[-1]
    return (f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
            f'viewBox="0 0 {w} {h}"><polyline points="{coords}" fill="none" stroke="#1f77b4" '
            f'stroke-width="1.2"/><circle class="spark-point" cx="{lx:.1f}" cy="{ly:.1f}" r="2" '
            f'fill="#1f77b4"/></svg>')  # fmt: skip


# --- pages ----------------------------------------------------------------------------


def _alerts_table(changes: list[Change], link: bool) -> list[str]:
    if not changes:
        return ['<p class="muted">No regression found.</p>']
    out = ["<table class=\"alerts\"><tr><th>benchmark</th><th>machine</th><th>suite</th>"
           "<th>change</th><th>before</th><th>after</th><th>first run after</th><th>date</th>"
           "<th>commit</th><th>p-value</th><th>status</th></tr>"]  # fmt: skip
    for c in changes:
        name = escape(c.bench)
        if link:
            name = f'<a href="{_attr(slug(c.bench))}">{name}</a>'
        status = ", ".join(x for x in ("new" if c.new and c.regression else "",
                                       "open" if c.open and c.regression else "") if x)  # fmt: skip
        cls = "alert" if c.regression else "good"
        key = f"{c.machine or '?'} / {c.suite or '?'}"
        data = (f'data-machine="{_attr(c.machine)}" data-suite="{_attr(c.suite)}" '
                f'data-key="{_attr(key)}"')  # fmt: skip
        out.append(
            f'<tr class="filterable change-row" {data}><td>{name}</td>'
            f"<td>{escape(c.machine or '?')}</td><td>{escape(c.suite or '?')}</td>"
            f'<td class="num {cls}">{_pct(c.change)}</td>'
            f'<td class="num">{fmt_num(c.before_median)}</td>'
            f'<td class="num">{fmt_num(c.after_median)}</td><td>{escape(c.run)}</td>'
            f"<td>{short_date(c.started)}</td><td>{escape((c.commit or '-')[:10])}</td>"
            f'<td class="num">{c.p_value:.3f}</td><td>{status}</td></tr>'
        )
    out.append("</table>")
    return out


def index_page(series: list[Series], changes: list[Change], *, last: int, params: str) -> str:
    alerts = [c for c in changes if c.regression]
    body = [
        "<h1>milabench history</h1>",
        f'<p class="muted">{len({s.bench for s in series})} benchmark(s), {len(series)} '
        f"series; generated {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; "
        f'{escape(params)}. Showing <span id="shown-count">{len(series)}</span> series.</p>',
        *_filters(series, with_toggles=False),
        '<table class="summary"><tr><th>benchmark</th><th>machine</th><th>suite</th>'
        "<th>tags</th><th>runs</th><th>latest</th><th>95% interval</th><th>units</th>"
        f"<th>last {last} runs</th><th>trend</th><th>open alerts</th></tr>",
    ]
    for s in series:
        p = s.points[-1]
        open_alerts = [c for c in alerts if c.open and c.bench == s.bench
                       and c.machine == s.machine and c.suite == s.suite]  # fmt: skip
        alert_text = "; ".join(f"{_pct(c.change)} at run {escape(c.run)}" for c in open_alerts)
        tr = trend(s, last)
        body.append(
            f'<tr class="filterable series-row" {_data(s)}>'
            f'<td><a href="{_attr(slug(s.bench))}">{escape(s.bench)}</a></td>'
            f"<td>{escape(s.machine or '?')}</td><td>{escape(s.suite or '?')}</td>"
            f'<td>{escape(", ".join(s.tags))}</td><td class="num">{len(s.points)}</td>'
            f'<td class="num">{fmt_num(p.value)}</td><td>{_interval(p.ci_low, p.ci_high)}</td>'
            f"<td>{escape(s.units or '')}</td><td>{sparkline(s, last)}</td>"
            f'<td class="num">{_pct(tr)}</td>'
            f'<td class="{"alert" if open_alerts else ""}">{alert_text}</td></tr>'
        )
    body.append("</table>")
    body.append("<h2>Alerts</h2>")
    body += _alerts_table(alerts, link=True)
    return _page("milabench history", body)


def bench_page(bench: str, series: list[Series], changes: list[Change], *, x_axis: str,
               params: str) -> str:  # fmt: skip
    n = sum(len(s.points) for s in series)
    body = [
        '<p><a href="index.html">&larr; all benchmarks</a></p>',
        f"<h1>{escape(bench)}</h1>",
        f'<p class="muted">{n} result(s) in {len(series)} series; {escape(params)}. '
        "Bars: 95% interval of each run's rate. Dashed lines: change points.</p>",
        *_filters(series, with_toggles=True),
        chart(bench, series, x_axis=x_axis),
        "<h2>Change points</h2>",
    ]
    if changes:
        body += _alerts_table(changes, link=False)
    else:
        body.append('<p class="muted">No change point.</p>')
    return _page(f"{bench} - milabench history", body)


def build(
    out_dir: Path,
    series: list[Series],
    changes: list[Change],
    *,
    x_axis: str = "date",
    last: int = 10,
    params: str = "",
) -> list[Path]:
    """Write index.html and one page per benchmark; the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "index.html"]
    written[0].write_text(index_page(series, changes, last=last, params=params), "utf-8")
    for bench in sorted({s.bench for s in series}):
        mine = [s for s in series if s.bench == bench]
        page = out_dir / slug(bench)
        page.write_text(bench_page(bench, mine, [c for c in changes if c.bench == bench],
                                   x_axis=x_axis, params=params), "utf-8")  # fmt: skip
        written.append(page)
    return written
