"""The page skeleton (milabench/htmlkit/page.py), and a page with every chart kind drawn
by headless Chromium; the console check itself is shown to catch a page error."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from headless import external_urls, open_page

from milabench.htmlkit.charts import (
    Interval,
    Line,
    Marker,
    Point,
    bar_chart,
    interval_chart,
    line_chart,
    series_chart,
    sparkline,
)
from milabench.htmlkit.markup import el
from milabench.htmlkit.page import page
from milabench.htmlkit.style import STYLESHEET
from milabench.htmlkit.table import table


def test_skeleton():
    out = page("a <b> & c", el("h1", "x"), None, [el("p", "y")])
    assert out.startswith('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
    assert "<title>a &lt;b&gt; &amp; c</title>" in out
    assert out.count("<style>") == 1 and STYLESHEET in out
    assert "<body>\n<h1>x</h1>\n<p>y</p>\n</body></html>\n" in out
    assert "<script" not in out and external_urls(out) == []
    scripted = page("t", el("p", "z"), script="document.body.dataset.ready = 1;")
    assert "<script>document.body.dataset.ready = 1;</script>\n</body></html>" in scripted
    with pytest.raises(ValueError, match="</script"):
        page("t", script="x = '</SCRIPT>'")


def _every_chart() -> str:
    wave = {f"d{k}": [(float(i), 50 + 10 * math.sin(i / 5 + k)) for i in range(60)]
            for k in range(3)}  # fmt: skip
    line = Line("m / s", [Point(i + 0.5, 10.0 + i, 9.0 + i, 11.0 + i, tip=f"run {i}",
                                attrs={"data-run": f"r{i}"}) for i in range(5)],
                markers=[Marker(2.0, "+10% at run r2", "changepoint")])  # fmt: skip
    return page(
        "every chart",
        el("h1", "every chart"),
        table(["name", "trend"], [["a", sparkline([1.0, 2.0, 1.5])]], numeric=()),
        el("div", line_chart("waves", wave, ylabel="rate", css="plot-waves"),
           bar_chart("bars", [("a", 3.0, 0.5), ("b", 2.0, 0.1)], css="plot-bars"),
           class_="plots"),
        series_chart("history", [line], x_range=(0.0, 5.0), x_ticks=[(0.5, "first")],
                     xlabel="commit", ylabel="rate", css="plot-history"),
        interval_chart("ratios", [Interval("a", 1.1, 1.0, 1.2)], reference=1.0,
                       css="plot-ratios"),
    )  # fmt: skip


@pytest.mark.slow
def test_every_chart_renders_in_chromium(chromium: str, tmp_path: Path):
    path = tmp_path / "charts.html"
    path.write_text(_every_chart(), encoding="utf-8")
    dom, console = open_page(chromium, path, tmp_path / "profile")
    assert console == [], console
    for css in ("plot-waves", "plot-bars", "plot-history", "plot-ratios"):
        assert f'class="plot {css}"' in dom
    assert dom.count('class="series"') == 4 and dom.count('class="point"') == 5
    assert 'class="spark"' in dom and 'class="ratio"' in dom and 'class="bar"' in dom


@pytest.mark.slow
def test_console_errors_are_seen(chromium: str, tmp_path: Path):
    # the pages' "no console error" checks are only worth something if an error shows up
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>missingFunction();</script></body></html>")
    _dom, console = open_page(chromium, bad, tmp_path / "profile")
    assert any("missingFunction" in line for line in console), console
