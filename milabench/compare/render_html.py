"""`milabench compare --format html`: one self-contained page for a `Comparison`.

The table of `row_cells`, the verdict and a forest plot (each benchmark's ratio B/A with
its 95% interval against a line at 1), built with `milabench.htmlkit` like every page:
no script, no network, so the page can be attached to a CI run and opened anywhere.
"""

from __future__ import annotations

from milabench.compare.comparison import HEADER, BenchComparison, Comparison, row_cells
from milabench.htmlkit.charts import Interval, interval_chart
from milabench.htmlkit.markup import Markup, el
from milabench.htmlkit.page import page
from milabench.htmlkit.style import FAIL_COLOR, NEUTRAL_COLOR, PASS_COLOR
from milabench.htmlkit.table import Row, table, verdict_class

# Ratios always span at least 1 +/- 5%: the default minimum effect.
AT_LEAST = (0.95, 1.05)
NUMERIC = range(1, 8)


def _color(r: BenchComparison) -> str:
    if r.regression:
        return FAIL_COLOR
    return PASS_COLOR if r.label == "faster" else NEUTRAL_COLOR


def _forest_plot(rows: list[BenchComparison]) -> Markup:
    """Ratio B/A of each benchmark with its 95% interval, a line at 1 (inline SVG)."""
    intervals = [Interval(r.name, r.ratio, r.ci_low, r.ci_high, _color(r)) for r in rows]
    return interval_chart("ratio B/A (95% interval)", intervals, reference=1.0,
                          at_least=AT_LEAST, css="plot-ratios")  # fmt: skip


def _row(r: BenchComparison, confirmed: set[str] | None) -> Row:
    cells = row_cells(r, confirmed)
    cls = "fail" if cells[-1] == "REGRESSION" else ("pass" if r.label == "faster" else "")
    return Row(cells, class_=cls)


def render_html(cmp: Comparison) -> str:
    """One self-contained page (the shared style, inline SVG, no script)."""
    regressions = cmp.regressions
    verdict = (
        f"REGRESSION: {', '.join(regressions)} (exit code 1)"
        if regressions
        else "no regression (exit code 0)"
    )
    plot = _forest_plot(cmp.rows)
    return page(
        f"milabench compare: {cmp.b_label} vs {cmp.a_label}",
        el("h1", "milabench compare"),
        el("p", "A: ", el("code", cmp.a_label), el("br"), "B: ", el("code", cmp.b_label)),
        el("p", el("b", verdict), class_=f"verdict {verdict_class(not regressions)}"),
        el(
            "p",
            "ratio = median(B) / median(A); higher is faster. Significant: p < alpha, the "
            "interval excludes 1 and the effect reaches the minimum effect.",
        ),  # fmt: skip
        table(
            HEADER, [_row(r, cmp.confirmed) for r in cmp.rows], numeric=NUMERIC, class_="comparison"
        ),  # fmt: skip
        el("div", plot, class_="plots") if plot else None,
        el("p", f"Regressions: {', '.join(regressions) or 'none'}"),
    )
