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
``<circle class="point" data-run=... data-value=...>``. Pages, tables and the chart are
drawn by `milabench.htmlkit`; this module maps series and change points onto them.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import re
from pathlib import Path

from milabench.history.series import Change, Series, fmt_num, short_date, trend
from milabench.history.store import SeriesPoint
from milabench.htmlkit.charts import Line, Marker, Point, series_chart, sparkline, ticks
from milabench.htmlkit.markup import AttrValue, Markup, el, raw
from milabench.htmlkit.page import page
from milabench.htmlkit.style import color
from milabench.htmlkit.table import Cell, Row, table

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


def _filters(series: list[Series], with_toggles: bool) -> Markup:
    def select(name: str, values: list[str]) -> Markup:
        opts = [el("option", "all", value="")]
        opts += [el("option", v, value=v) for v in values]
        return el("label", f"{name} ", el("select", opts, id=f"filter-{name}"))

    machines = sorted({s.machine or "?" for s in series})
    suites = sorted({s.suite or "?" for s in series})
    tags = sorted({t for s in series for t in s.tags})
    parts = [select("machine", machines), select("suite", suites), select("tag", tags)]
    if with_toggles:
        parts += [el("br"), "series: "]
        parts += [
            el("label", el("input", type="checkbox", class_="series-toggle", data_key=s.key,
                           checked=True), " ",
               el("span", class_="swatch", style=f"background:{color(i)}"), f" {s.key}")
            for i, s in enumerate(series)
        ]  # fmt: skip
    return el("div", parts, class_="filters")


def _data(s: Series) -> dict[str, AttrValue]:
    """The data-* attributes the filters read."""
    return {"data-key": s.key, "data-machine": s.machine or "?", "data-suite": s.suite or "?",
            "data-tags": ",".join(s.tags) or "?"}  # fmt: skip


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100.0 * x:+.1f}%"


def _interval(lo: float | None, hi: float | None) -> str:
    return f"[{fmt_num(lo)}, {fmt_num(hi)}]" if lo is not None and hi is not None else ""


# --- the benchmark chart --------------------------------------------------------------


def _commit_key(p: SeriesPoint) -> str:
    return p.commit or f"run {p.run}"


def _x_axis(pts: list[SeriesPoint], x_axis: str):
    """(x of a point, x range, x tick labels, axis title): one slot per commit, or the
    run date with a margin."""
    if x_axis == "commit":
        order: list[str] = []
        for p in sorted(pts, key=lambda p: p.started or 0.0):
            if _commit_key(p) not in order:
                order.append(_commit_key(p))
        slot = {k: i for i, k in enumerate(order)}
        stride = max(1, math.ceil(len(order) / 12))
        labels = [(i + 0.5, k[:10]) for i, k in enumerate(order) if i % stride == 0]
        return (lambda p: slot[_commit_key(p)] + 0.5), (0.0, float(len(order))), labels, "commit"
    times = [p.started or 0.0 for p in pts]
    ta, tb = min(times), max(times)
    span = tb - ta or 1.0
    fmt = "%Y-%m-%d" if span > 3 * 86400 else "%m-%d %H:%M:%S" if span < 600 else "%m-%d %H:%M"
    labels = [(t, datetime.datetime.fromtimestamp(t, datetime.UTC).strftime(fmt))
              for t in ticks(ta, tb)]  # fmt: skip
    return ((lambda p: p.started or 0.0), (ta - 0.03 * span, tb + 0.03 * span), labels,
            "run date (UTC)")  # fmt: skip


def chart(bench: str, series: list[Series], *, x_axis: str = "date") -> Markup:
    """Rate over time, one series per machine/suite, with intervals and change points."""
    pts = [p for s in series for p in s.points]
    units = next((s.units for s in series if s.units), None) or "rate"
    title = f"{bench}: {units} per run"
    if not pts:
        return series_chart(title, [], x_range=(0.0, 1.0), x_ticks=[], xlabel="", ylabel=units,
                            css="plot-history", attrs={"data-bench": bench})  # fmt: skip
    px, x_range, labels, xlabel = _x_axis(pts, x_axis)
    lines = []
    for s in series:
        points = [
            Point(px(p), p.value, p.ci_low, p.ci_high,
                  tip=f"{p.run} ({short_date(p.started)}, {(p.commit or '-')[:10]}): "
                      f"{fmt_num(p.value)} {_interval(p.ci_low, p.ci_high)}",
                  attrs={"data-run": p.run or "?", "data-value": repr(p.value),
                         "data-date": short_date(p.started) or "?",
                         "data-commit": p.commit or "?"})
            for p in s.points
        ]  # fmt: skip
        markers = []
        for cp in s.changes:
            first = s.points[cp.index]
            x = (points[cp.index - 1].x + points[cp.index].x) / 2 if cp.index > 0 else points[0].x
            cls = "changepoint regression" if cp.regression else "changepoint improvement"
            markers.append(Marker(x, f"{100.0 * cp.change:+.1f}% at run {first.run}", cls,
                                  {"data-run": first.run or "?"}))  # fmt: skip
        lines.append(Line(s.key, points, markers, class_="filterable", attrs=_data(s)))
    return series_chart(title, lines, x_range=x_range, x_ticks=labels, xlabel=xlabel,
                        ylabel=units, css="plot-history", attrs={"data-bench": bench})  # fmt: skip


# --- pages ----------------------------------------------------------------------------

ALERT_COLUMNS = ["benchmark", "machine", "suite", "change", "before", "after",
                 "first run after", "date", "commit", "p-value", "status"]  # fmt: skip
ALERT_NUMERIC = (3, 4, 5, 9)
SUMMARY_NUMERIC = (4, 5, 9)


def _alerts_table(changes: list[Change], link: bool) -> Markup:
    if not changes:
        return el("p", "No regression found.", class_="muted")
    rows = []
    for c in changes:
        name = el("a", c.bench, href=slug(c.bench)) if link else c.bench
        status = ", ".join(x for x in ("new" if c.new and c.regression else "",
                                       "open" if c.open and c.regression else "") if x)  # fmt: skip
        key = f"{c.machine or '?'} / {c.suite or '?'}"
        data = {"data-machine": c.machine or "?", "data-suite": c.suite or "?", "data-key": key}
        cells = [name, c.machine or "?", c.suite or "?",
                 Cell(_pct(c.change), class_="alert" if c.regression else "good"),
                 fmt_num(c.before_median), fmt_num(c.after_median), c.run, short_date(c.started),
                 (c.commit or "-")[:10], f"{c.p_value:.3f}", status]  # fmt: skip
        rows.append(Row(cells, class_="filterable change-row", attrs=data))
    return table(ALERT_COLUMNS, rows, numeric=ALERT_NUMERIC, class_="alerts")


def index_page(series: list[Series], changes: list[Change], *, last: int, params: str) -> str:
    alerts = [c for c in changes if c.regression]
    columns = ["benchmark", "machine", "suite", "tags", "runs", "latest", "95% interval",
               "units", f"last {last} runs", "trend", "open alerts"]  # fmt: skip
    rows = []
    for s in series:
        p = s.points[-1]
        open_alerts = [c for c in alerts if c.open and c.bench == s.bench
                       and c.machine == s.machine and c.suite == s.suite]  # fmt: skip
        alert_text = "; ".join(f"{_pct(c.change)} at run {c.run}" for c in open_alerts)
        cells = [el("a", s.bench, href=slug(s.bench)), s.machine or "?", s.suite or "?",
                 ", ".join(s.tags), str(len(s.points)), fmt_num(p.value),
                 _interval(p.ci_low, p.ci_high), s.units or "", sparkline(
                     [q.value for q in s.points[-last:]]), _pct(trend(s, last)),
                 Cell(alert_text, class_="alert" if open_alerts else "")]  # fmt: skip
        rows.append(Row(cells, class_="filterable series-row", attrs=_data(s)))
    generated = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M}"
    return page(
        "milabench history",
        el("h1", "milabench history"),
        el("p", f"{len({s.bench for s in series})} benchmark(s), {len(series)} series; "
           f"generated {generated} UTC; {params}. Showing ",
           el("span", str(len(series)), id="shown-count"), " series.", class_="muted"),
        _filters(series, with_toggles=False),
        table(columns, rows, numeric=SUMMARY_NUMERIC, class_="summary"),
        el("h2", "Alerts"),
        _alerts_table(alerts, link=True),
        script=JS,
    )  # fmt: skip


def bench_page(bench: str, series: list[Series], changes: list[Change], *, x_axis: str,
               params: str) -> str:  # fmt: skip
    n = sum(len(s.points) for s in series)
    return page(
        f"{bench} - milabench history",
        el("p", el("a", raw("&larr; all benchmarks"), href="index.html")),
        el("h1", bench),
        el("p", f"{n} result(s) in {len(series)} series; {params}. Bars: 95% interval of "
           "each run's rate. Dashed lines: change points.", class_="muted"),
        _filters(series, with_toggles=True),
        chart(bench, series, x_axis=x_axis),
        el("h2", "Change points"),
        _alerts_table(changes, link=False) if changes
        else el("p", "No change point.", class_="muted"),
        script=JS,
    )  # fmt: skip


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
