"""Inline-SVG charts: the drawing of every milabench page, offline and script-free.

Kinds: `line_chart` (series over time, a legend), `bar_chart` (bars with error bars),
`series_chart` (series of points with 95% intervals, tooltips and labelled vertical
markers, over a numeric or labelled x axis), `interval_chart` (one labelled value with
its interval per row against a reference line) and `sparkline`. They share one `Frame`
(plot area, linear scales, axes, ticks) and one root (`chart_root`: the ``<title>``, a
white background). Drawn elements carry class names that tests and readers can find:
``polyline.series``, ``rect.bar``, ``line.errorbar``, ``circle.point``, ``circle.ratio``,
``line.interval``, ``svg.spark``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from milabench.htmlkit.markup import AttrValue, Child, Markup, el, join
from milabench.htmlkit.style import NEUTRAL_COLOR, color

MAX_POINTS = 400  # a polyline keeps at most this many points: the plot is narrower
AXIS = "#444"
GRID = "#eee"


def ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """`n` + 1 evenly spaced values from `lo` to `hi` (just `lo` when the range is empty)."""
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / n for i in range(n + 1)]


def tick_label(v: float, step: float | None = None) -> str:
    """A tick's text, with just enough decimals to tell ticks `step` apart."""
    a = abs(v)
    if a >= 1e6:
        return f"{v:.3g}"
    if step and step > 0:
        digits = max(0, min(6, 1 - math.floor(math.log10(step))))
        return f"{v:.{digits}f}"
    return f"{v:.1f}" if a < 100 else f"{v:.0f}"


def finite(*values: float | None) -> bool:
    """True when every value is a finite number."""
    return all(v is not None and math.isfinite(v) for v in values)


def chart_root(width: int, height: int, title: str, *body: Child, class_: str = "",
               heading: bool = True, attrs: Mapping[str, AttrValue] | None = None) -> Markup:  # fmt: skip
    """The ``<svg class="plot ...">`` element: its ``<title>``, a white background, the
    title drawn at the top when `heading`, then `body`."""
    return el(
        "svg",
        "\n",
        el("title", title),
        el("rect", x=0, y=0, width=width, height=height, fill="#ffffff"),
        el("text", title, x=8, y=18, font_size=13, font_weight="bold") if heading else None,
        "\n",
        join(body, "\n"),
        "\n",
        class_=f"plot {class_}".strip(),
        xmlns="http://www.w3.org/2000/svg",
        width=width,
        height=height,
        viewBox=f"0 0 {width} {height}",
        role="img",
        attrs=attrs,
    )


@dataclass(frozen=True)
class Frame:
    """A chart's plot area inside its `width` x `height` (the margins around it) and the
    linear scales from data (`x0`..`x1`, `y0`..`y1`) to pixels."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x0: float = 0.0
    x1: float = 1.0
    y0: float = 0.0
    y1: float = 1.0

    @property
    def pw(self) -> float:
        return self.width - self.left - self.right

    @property
    def ph(self) -> float:
        return self.height - self.top - self.bottom

    @property
    def base(self) -> float:
        """The pixel row of the x axis."""
        return self.top + self.ph

    def x(self, v: float) -> float:
        span = self.x1 - self.x0 or 1.0
        return self.left + (v - self.x0) / span * self.pw

    def y(self, v: float) -> float:
        span = self.y1 - self.y0 or 1.0
        return self.base - (v - self.y0) / span * self.ph

    def axes(self, *, y_axis: bool = True) -> list[Markup]:
        """The x axis line, and the y axis line when `y_axis`."""
        out = [el("line", x1=self.left, y1=self.base, x2=self.left + self.pw, y2=self.base,
                  stroke=AXIS)]  # fmt: skip
        if y_axis:
            out.append(el("line", x1=self.left, y1=self.top, x2=self.left, y2=self.base,
                          stroke=AXIS))  # fmt: skip
        return out

    def y_ticks(self, *, grid: bool = True) -> list[Markup]:
        """Five labelled values on the y axis, with light grid lines across when `grid`."""
        out = []
        step = (self.y1 - self.y0) / 4
        for t in ticks(self.y0, self.y1):
            y = self.y(t)
            if grid:
                out.append(el("line", x1=self.left, y1=y, x2=self.left + self.pw, y2=y,
                              stroke=GRID))  # fmt: skip
            out.append(el("text", tick_label(t, step), x=self.left - 4, y=y + 4, font_size=10,
                          text_anchor="end"))  # fmt: skip
        return out

    def x_ticks(self, labels: Sequence[tuple[float, str]], *, rotate: int = 0) -> list[Markup]:
        """Labels under the x axis at data positions; rotated (degrees) when `rotate`."""
        out = []
        y = self.base + (12 if rotate else 14)
        for value, text in labels:
            x = self.x(value)
            out.append(el("text", text, x=x, y=y, font_size=10,
                          text_anchor="end" if rotate else "middle",
                          transform=f"rotate({rotate} {x:.1f} {y:.1f})" if rotate else None))  # fmt: skip
        return out

    def numeric_x_ticks(self) -> list[Markup]:
        step = (self.x1 - self.x0) / 4
        return self.x_ticks([(t, tick_label(t, step)) for t in ticks(self.x0, self.x1)])

    def labels(self, *, x: str = "", y: str = "") -> list[Markup]:
        """The axis titles: `x` under the axis, `y` turned along the y axis."""
        out = []
        if x:
            out.append(el("text", x, x=self.left + self.pw / 2, y=self.height - 6, font_size=11,
                          text_anchor="middle"))  # fmt: skip
        if y:
            mid = self.top + self.ph / 2
            out.append(el("text", y, x=14, y=mid, font_size=11, text_anchor="middle",
                          transform=f"rotate(-90 14 {mid:.1f})"))  # fmt: skip
        return out

    def polyline(self, points: Sequence[tuple[float, float]], stroke: str, *, label: str,
                 width: float = 1.5) -> Markup:  # fmt: skip
        """A ``polyline.series`` through data points."""
        coords = " ".join(f"{self.x(x):.1f},{self.y(y):.1f}" for x, y in points)
        return el("polyline", class_="series", data_label=label, points=coords, fill="none",
                  stroke=stroke, stroke_width=width)  # fmt: skip

    def errorbar(self, x: float, low: float, high: float, stroke: str, *, cap: float = 0,
                 opacity: float | None = None) -> list[Markup]:  # fmt: skip
        """A vertical ``line.errorbar`` from `low` to `high` at `x` (caps `cap` px wide)."""
        px, ya, yb = self.x(x), self.y(low), self.y(high)
        out = [el("line", class_="errorbar", x1=px, y1=ya, x2=px, y2=yb, stroke=stroke,
                  stroke_opacity=None if opacity is None else f"{opacity:g}")]  # fmt: skip
        if cap:
            out += [el("line", x1=px - cap, y1=y, x2=px + cap, y2=y, stroke=stroke)
                    for y in (yb, ya)]  # fmt: skip
        return out


def _no_samples(frame: Frame) -> Markup:
    return el("text", "no samples", x=frame.width / 2, y=frame.height / 2, text_anchor="middle",
              font_size=12, fill="#777")  # fmt: skip


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """At most about `MAX_POINTS` points, evenly strided, the last one kept."""
    if len(points) <= MAX_POINTS:
        return points
    stride = math.ceil(len(points) / MAX_POINTS)
    return points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def line_chart(title: str, series: Mapping[str, Sequence[tuple[float, float]]], *,
               ylabel: str = "", xlabel: str = "seconds", css: str = "") -> Markup:  # fmt: skip
    """One polyline per series (sorted by label) with a legend; y starts at 0 or below."""
    frame = Frame(640, 260, 64, 120, 28, 36)
    clean = {
        label: [(x, y) for x, y in pts if math.isfinite(x) and math.isfinite(y)]
        for label, pts in series.items()
    }
    allpts = [p for pts in clean.values() for p in pts]
    if not allpts:
        return chart_root(frame.width, frame.height, title, *frame.labels(y=ylabel),
                          _no_samples(frame), class_=f"{css} empty")  # fmt: skip
    x0, x1 = min(p[0] for p in allpts), max(p[0] for p in allpts)
    y0, y1 = min(0.0, min(p[1] for p in allpts)), max(p[1] for p in allpts)
    frame = Frame(640, 260, 64, 120, 28, 36, x0, x1 if x1 > x0 else x0 + 1, y0,
                  y1 if y1 > y0 else y0 + 1)  # fmt: skip
    body = [*frame.axes(), *frame.y_ticks(), *frame.numeric_x_ticks(),
            *frame.labels(x=xlabel, y=ylabel)]  # fmt: skip
    for i, (label, pts) in enumerate(sorted(clean.items())):
        if not pts:
            continue
        stroke = color(i)
        body.append(frame.polyline(_thin(pts), stroke, label=label))
        if len(pts) == 1:
            body.append(el("circle", cx=frame.x(pts[0][0]), cy=frame.y(pts[0][1]), r=3,
                           fill=stroke))  # fmt: skip
        ly = frame.top + 12 + 14 * i
        lx = frame.width - frame.right + 8
        body.append(el("rect", x=lx, y=ly - 8, width=10, height=10, fill=stroke))
        body.append(el("text", label[:16], x=lx + 14, y=ly, font_size=10))
    return chart_root(frame.width, frame.height, title, *body, class_=css)


def bar_chart(title: str, bars: Sequence[tuple[str, float, float]], *, ylabel: str = "",
              css: str = "") -> Markup:  # fmt: skip
    """Bars (label, value, error half-width) from 0, with error bars, scaled to the top."""
    clean = [(lab, v, e if finite(e) else 0.0) for lab, v, e in bars if finite(v)]
    if not clean:
        return line_chart(title, {}, ylabel=ylabel, css=css)
    top = max(v + e for _, v, e in clean) or 1.0
    frame = Frame(640, 260, 64, 20, 28, 76, 0.0, float(len(clean)), 0.0, top)
    body = [*frame.axes(y_axis=False), *frame.y_ticks(grid=False), *frame.labels(y=ylabel)]
    bw = max(4.0, frame.pw / len(clean) * 0.6)
    for i, (label, v, e) in enumerate(clean):
        cx, y = frame.x(i + 0.5), frame.y(v)
        body.append(el("rect", class_="bar", data_label=label, x=cx - bw / 2, y=y, width=bw,
                       height=frame.base - y, fill=color(i)))  # fmt: skip
        if e > 0:
            body += frame.errorbar(i + 0.5, v - e, v + e, "#000", cap=4)
    body += frame.x_ticks([(i + 0.5, lab[:24]) for i, (lab, _, _) in enumerate(clean)],
                          rotate=-30)  # fmt: skip
    return chart_root(frame.width, frame.height, title, *body, class_=css)


@dataclass(frozen=True)
class Point:
    """A point of a `Line`: `low`..`high` its interval, `tip` its tooltip, `attrs` the
    ``data-*`` attributes of its ``circle.point``."""

    x: float
    y: float
    low: float | None = None
    high: float | None = None
    tip: str = ""
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Marker:
    """A labelled vertical line at `x` (a change point), drawn in its line's colour."""

    x: float
    text: str
    class_: str = "marker"
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Line:
    """One series of a `series_chart`, drawn in a ``g.series-group`` with `class_` and
    `attrs` (what a page's filters read)."""

    label: str
    points: Sequence[Point]
    markers: Sequence[Marker] = ()
    class_: str = ""
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)


def series_chart(title: str, lines: Sequence[Line], *, x_range: tuple[float, float],
                 x_ticks: Sequence[tuple[float, str]], xlabel: str, ylabel: str, css: str = "",
                 attrs: Mapping[str, AttrValue] | None = None) -> Markup:  # fmt: skip
    """Points joined per line, each with its interval as an error bar and a tooltip; the
    markers as dashed vertical lines labelled near the top. x spans `x_range`, labelled
    by `x_ticks` (value, text); y spans the intervals with a margin."""
    frame = Frame(960, 380, 78, 24, 34, 58)
    pts = [p for line in lines for p in line.points if finite(p.x, p.y)]
    if not pts:
        return chart_root(frame.width, frame.height, title, _no_samples(frame),
                          class_=f"{css} empty", heading=False, attrs=attrs)  # fmt: skip
    y0 = min(p.low if finite(p.low) else p.y for p in pts)
    y1 = max(p.high if finite(p.high) else p.y for p in pts)
    pad = 0.08 * (y1 - y0) if y1 > y0 else 0.05 * abs(y1) or 1.0
    frame = Frame(960, 380, 78, 24, 34, 58, x_range[0], x_range[1], y0 - pad, y1 + pad)
    body = [*frame.axes(), *frame.labels(x=xlabel, y=ylabel), *frame.y_ticks(),
            *frame.x_ticks(x_ticks, rotate=-20)]  # fmt: skip
    row = 0
    for i, line in enumerate(lines):
        stroke = color(i)
        good = [p for p in line.points if finite(p.x, p.y)]
        group = [frame.polyline([(p.x, p.y) for p in good], stroke, label=line.label, width=1.2)]
        for p in good:
            if finite(p.low, p.high):
                group += frame.errorbar(p.x, p.low, p.high, stroke, opacity=0.6)
            group.append(el("circle", el("title", p.tip) if p.tip else None, class_="point",
                            cx=frame.x(p.x), cy=frame.y(p.y), r=3, fill=stroke,
                            attrs=p.attrs))  # fmt: skip
        for m in line.markers:
            x = frame.x(m.x)
            ly = frame.top + 12 + 13 * (row % 6)
            row += 1
            anchor, dx = ("end", -4) if x > frame.left + frame.pw * 0.6 else ("start", 4)
            group.append(el("line", class_=m.class_, x1=x, y1=frame.top, x2=x, y2=frame.base,
                            stroke=stroke, stroke_dasharray="5,3", attrs=m.attrs))  # fmt: skip
            group.append(el("text", m.text, class_="marker-label", x=x + dx, y=ly, font_size=11,
                            text_anchor=anchor, fill=stroke))  # fmt: skip
        body.append(el("g", "\n", join(group, "\n"), "\n",
                       class_=f"series-group {line.class_}".strip(), attrs=line.attrs))  # fmt: skip
    return chart_root(frame.width, frame.height, title, *body, class_=css, heading=False,
                      attrs=attrs)  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """A row of an `interval_chart`: `value` and its interval `low`..`high` (NaN: none)."""

    label: str
    value: float
    low: float
    high: float
    color: str = NEUTRAL_COLOR


def interval_chart(title: str, rows: Sequence[Interval], *, reference: float,
                   at_least: tuple[float, float] | None = None, css: str = "") -> Markup:  # fmt: skip
    """One row per label: its interval as a line, its value as a ``circle.ratio``, against
    a dashed ``line.one`` at `reference`; the x range covers `at_least` too."""
    shown = [r for r in rows if finite(r.value)]
    if not shown:
        return Markup("")
    ends = [reference] + [r.value for r in shown]
    ends += [v for r in shown for v in (r.low, r.high) if finite(v)]
    lo, hi = min(ends), max(ends)
    pad = (hi - lo) * 0.1
    lo, hi = lo - pad, hi + pad
    if at_least is not None:
        lo, hi = min(lo, at_least[0]), max(hi, at_least[1])
    row_h, top = 22, 30
    height = top + row_h * len(shown) + 30
    frame = Frame(640, height, 170, 30, top, 30, lo, hi)
    base = height - 10
    body = [
        el("line", class_="one", x1=frame.x(reference), y1=top - 6, x2=frame.x(reference),
           y2=height - 24, stroke="#888", stroke_dasharray="4 3"),
        el("text", f"{reference:g}", x=frame.x(reference), y=base, font_size=10,
           text_anchor="middle"),
        el("text", f"{lo:.4g}", x=frame.left, y=base, font_size=10, text_anchor="middle"),
        el("text", f"{hi:.4g}", x=frame.left + frame.pw, y=base, font_size=10,
           text_anchor="middle"),
    ]  # fmt: skip
    for i, r in enumerate(shown):
        y = top + row_h * i + row_h / 2
        body.append(el("text", r.label, x=frame.left - 8, y=y + 4, font_size=11,
                       text_anchor="end"))  # fmt: skip
        if finite(r.low, r.high):
            body.append(el("line", class_="interval", x1=frame.x(r.low), y1=y, x2=frame.x(r.high),
                           y2=y, stroke=r.color, stroke_width=2))  # fmt: skip
        body.append(el("circle", class_="ratio", cx=frame.x(r.value), cy=y, r=4, fill=r.color))
    return chart_root(frame.width, height, title, *body, class_=css)


def sparkline(values: Sequence[float], *, width: int = 120, height: int = 28,
              min_band: float = 0.04) -> Markup:  # fmt: skip
    """A small line of `values` with its last point marked; a spread under `min_band`
    of the middle value is drawn flat (run-to-run noise)."""
    values = [v for v in values if finite(v)]
    if not values:
        return Markup("")
    m = 3
    lo, hi = min(values), max(values)
    mid = (lo + hi) / 2
    floor = min_band * abs(mid)
    if hi - lo < floor:
        lo, hi = mid - floor / 2, mid + floor / 2
    frame = Frame(width, height, m, m, m, m, 0.0, float(max(len(values) - 1, 1)), lo, hi)
    pts = list(enumerate(values))
    lx, ly = pts[-1]
    return el(
        "svg",
        el("polyline", points=" ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in pts),
           fill="none", stroke=NEUTRAL_COLOR, stroke_width=1.2),
        el("circle", class_="spark-point", cx=frame.x(lx), cy=frame.y(ly), r=2,
           fill=NEUTRAL_COLOR),
        class_="spark", xmlns="http://www.w3.org/2000/svg", width=width, height=height,
        viewBox=f"0 0 {width} {height}",
    )  # fmt: skip
