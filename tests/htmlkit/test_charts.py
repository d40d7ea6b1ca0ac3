"""Inline-SVG charts (milabench/htmlkit/charts.py): the drawn elements, their classes,
positions inside the plot, and the edge cases (no data, one point, long series)."""

from __future__ import annotations

import math
import re

import pytest

from milabench.htmlkit.charts import (
    MAX_POINTS,
    Frame,
    Interval,
    Line,
    Marker,
    Point,
    bar_chart,
    interval_chart,
    line_chart,
    series_chart,
    sparkline,
    tick_label,
    ticks,
)


def _points(svg: str) -> list[tuple[float, float]]:
    coords = re.search(r'points="([^"]*)"', svg).group(1)
    return [tuple(map(float, p.split(","))) for p in coords.split()]


def test_ticks_and_labels():
    assert ticks(0, 100) == [0, 25, 50, 75, 100] and ticks(3, 3) == [3]
    assert tick_label(0.25, 0.25) == "0.25" and tick_label(1500, 250) == "1500"
    assert tick_label(2.5e7) == "2.5e+07" and tick_label(12.34) == "12.3"


def test_frame_maps_data_inside_the_plot_area():
    f = Frame(200, 100, 20, 10, 5, 15, x0=0, x1=10, y0=-1, y1=1)
    assert (f.x(0), f.x(10)) == (20, 190)
    assert (f.y(1), f.y(-1)) == (5, 85) and f.base == 85
    flat = Frame(200, 100, 20, 10, 5, 15, x0=2, x1=2, y0=4, y1=4)
    assert math.isfinite(flat.x(2)) and math.isfinite(flat.y(4))


def test_line_chart_series_legend_and_thinning():
    long = [(float(i), float(i % 7)) for i in range(5 * MAX_POINTS + 3)]
    svg = line_chart("t<1>", {"b": long, "a": [(0.0, 1.0)], "bad": [(math.nan, 1.0)]},
                     ylabel="MiB", css="plot-memory")  # fmt: skip
    assert svg.startswith('<svg class="plot plot-memory"')
    assert "<title>t&lt;1&gt;</title>" in svg
    labels = re.findall(r'<polyline class="series" data-label="([^"]*)"', svg)
    assert labels == ["a", "b"]  # sorted; a series with no finite point is left out
    series_b = svg[svg.index('data-label="b"') :]
    pts = _points(series_b)
    assert len(pts) <= MAX_POINTS + 1 and pts[-1][0] == pytest.approx(640 - 120)
    assert svg.count("<circle") == 1  # the lone point of "a" is drawn as a dot
    assert ">MiB</text>" in svg and ">seconds</text>" in svg
    empty = line_chart("nothing", {"x": []}, css="plot-load")
    assert 'class="plot plot-load empty"' in empty and ">no samples</text>" in empty


def test_bar_chart_bars_and_error_bars():
    svg = bar_chart("rates", [("a", 10.0, 1.0), ("b", 5.0, 0.0), ("nan", math.nan, 1.0)],
                    css="plot-bars")  # fmt: skip
    bars = re.findall(r'<rect class="bar" data-label="(\w+)" x="[^"]+" y="([^"]+)" '
                      r'width="[^"]+" height="([^"]+)"', svg)  # fmt: skip
    assert [b[0] for b in bars] == ["a", "b"]
    (ya, ha), (yb, hb) = [(float(y), float(h)) for _, y, h in bars]
    assert ya + ha == pytest.approx(yb + hb)  # one baseline
    assert ha / hb == pytest.approx(2.0, rel=0.01)
    assert svg.count('class="errorbar"') == 1  # none for a zero half-width
    assert "empty" in bar_chart("none", [("x", math.nan, 0.0)])


def test_series_chart_points_intervals_markers_and_attributes():
    line = Line(
        "gpu01 / suite",
        [Point(0.5, 10.0, 9.0, 11.0, tip="run 1", attrs={"data-run": "r1"}),
         Point(1.5, 12.0, attrs={"data-run": "r2"})],
        markers=[Marker(1.0, "+20% at run r2", "changepoint improvement", {"data-run": "r2"})],
        class_="filterable",
        attrs={"data-machine": "gpu01"},
    )  # fmt: skip
    svg = series_chart("bench: rate per run", [line], x_range=(0.0, 2.0),
                       x_ticks=[(0.5, "c1"), (1.5, "c2")], xlabel="commit", ylabel="items/s",
                       css="plot-history", attrs={"data-bench": "bench"})  # fmt: skip
    assert 'data-bench="bench"' in svg.split(">")[0]
    assert '<g class="series-group filterable" data-machine="gpu01">' in svg
    assert re.findall(r'<circle class="point"[^>]* data-run="(r\d)"', svg) == ["r1", "r2"]
    assert "<title>run 1</title></circle>" in svg
    assert svg.count('class="errorbar"') == 1  # only the point with an interval
    assert re.search(r'<line class="changepoint improvement"[^>]* data-run="r2"/>', svg)
    assert ">+20% at run r2</text>" in svg and ">c1</text>" in svg and ">commit</text>" in svg
    x_marker = float(re.search(r'changepoint improvement" x1="([^"]+)"', svg).group(1))
    xs = [float(x) for x in re.findall(r'<circle class="point" cx="([^"]+)"', svg)]
    assert x_marker == pytest.approx((xs[0] + xs[1]) / 2, abs=0.1)
    empty = series_chart("t", [], x_range=(0, 1), x_ticks=[], xlabel="", ylabel="")
    assert "empty" in empty and "no samples" in empty


def test_interval_chart_rows_and_reference():
    rows = [Interval("a", 0.9, 0.85, 0.95, "#c62828"), Interval("b", 1.2, math.nan, math.nan),
            Interval("none", math.nan, math.nan, math.nan)]  # fmt: skip
    svg = interval_chart("ratio", rows, reference=1.0, at_least=(0.95, 1.05), css="plot-ratios")
    assert svg.count('class="ratio"') == 2 and svg.count('class="interval"') == 1
    one = float(re.search(r'<line class="one" x1="([^"]+)"', svg).group(1))
    ratios = [float(x) for x in re.findall(r'<circle class="ratio" cx="([^"]+)"', svg)]
    assert ratios[0] < one < ratios[1]
    assert interval_chart("ratio", rows[2:], reference=1.0) == ""


def test_sparkline_flat_band_and_last_point():
    noisy = sparkline([100.0, 100.5, 99.8, 100.2])
    ys = [y for _, y in _points(noisy)]
    assert max(ys) - min(ys) < 28 / 2  # within the +-2% band: drawn nearly flat
    steep = sparkline([100.0, 50.0])
    ys = [y for _, y in _points(steep)]
    assert ys[1] - ys[0] == pytest.approx(28 - 6)
    assert 'class="spark-point"' in steep and sparkline([]) == ""
