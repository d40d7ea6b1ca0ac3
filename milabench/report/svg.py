"""Tiny inline-SVG charts (line charts and bar charts with error bars).

The HTML report must work offline and be a single file: no CDN, no JavaScript library.
Two chart kinds are enough for it, drawn as plain SVG elements with class names that tests
(and curious readers) can find: `polyline.series`, `rect.bar`, `line.errorbar`.
"""

from __future__ import annotations

import math
from html import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
W, H = 640, 260
ML, MR, MT, MB = 64, 120, 28, 36
MAX_POINTS = 400


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / n for i in range(n + 1)]


def _fmt(v: float, step: float | None = None) -> str:
    """Tick label with just enough decimals to tell neighbouring ticks apart."""
    a = abs(v)
    if a >= 1e6:
        return f"{v:.3g}"
    if step and step > 0:
        digits = max(0, min(6, 1 - math.floor(math.log10(step))))
        return f"{v:.{digits}f}"
    return f"{v:.1f}" if a < 100 else f"{v:.0f}"


def _frame(title: str, css: str, body: list[str], ylabel: str) -> str:
    return "\n".join(
        [
            f'<svg class="plot {css}" xmlns="http://www.w3.org/2000/svg" width="{W}" '
            f'height="{H}" viewBox="0 0 {W} {H}" role="img">',
            f"<title>{escape(title)}</title>",
            f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>',
            f'<text x="{ML}" y="18" font-size="13" font-weight="bold">{escape(title)}</text>',
            f'<text x="12" y="{MT + (H - MT - MB) / 2}" font-size="11" '
            f'transform="rotate(-90 12 {MT + (H - MT - MB) / 2})">{escape(ylabel)}</text>',
            *body,
            "</svg>",
        ]
    )


def line_chart(
    title: str, series: dict[str, list[tuple[float, float]]], *, ylabel: str = "", css: str = ""
) -> str:
    """One polyline per series; x is usually seconds since the run's start."""
    pts = [(x, y) for s in series.values() for x, y in s if math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return _frame(title, css + " empty", [
            f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" font-size="12" fill="#777">'
            "no samples</text>"
        ], ylabel)  # fmt: skip
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(0.0, min(p[1] for p in pts)), max(p[1] for p in pts)
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = y1 if y1 > y0 else y0 + 1
    pw, ph = W - ML - MR, H - MT - MB

    def sx(x: float) -> float:
        return ML + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return MT + ph - (y - y0) / (y1 - y0) * ph

    body = [
        f'<line x1="{ML}" y1="{MT + ph}" x2="{ML + pw}" y2="{MT + ph}" stroke="#444"/>',
        f'<line x1="{ML}" y1="{MT}" x2="{ML}" y2="{MT + ph}" stroke="#444"/>',
    ]
    for t in _ticks(y0, y1):
        body.append(
            f'<text x="{ML - 4}" y="{sy(t) + 4:.1f}" font-size="10" text-anchor="end">{_fmt(t, (y1 - y0) / 4)}</text>'
            f'<line x1="{ML}" y1="{sy(t):.1f}" x2="{ML + pw}" y2="{sy(t):.1f}" stroke="#eee"/>'
        )
    for t in _ticks(x0, x1):
        body.append(
            f'<text x="{sx(t):.1f}" y="{MT + ph + 14}" font-size="10" text-anchor="middle">{_fmt(t, (x1 - x0) / 4)}</text>'
        )
    body.append(
        f'<text x="{ML + pw / 2}" y="{H - 4}" font-size="11" text-anchor="middle">seconds</text>'
    )
    for i, (label, s) in enumerate(sorted(series.items())):
        color = PALETTE[i % len(PALETTE)]
        good = [(x, y) for x, y in s if math.isfinite(x) and math.isfinite(y)]
        if not good:
            continue
        if len(good) > MAX_POINTS:  # keep pages small: the chart is MAX_POINTS px wide anyway
            stride = math.ceil(len(good) / MAX_POINTS)
            good = good[::stride] + ([good[-1]] if (len(good) - 1) % stride else [])
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in good)
        body.append(
            f'<polyline class="series" data-label="{escape(label)}" points="{coords}" '
            f'fill="none" stroke="{color}" stroke-width="1.5"/>'
        )
        if len(good) == 1:
            x, y = good[0]
            body.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>')
        ly = MT + 12 + 14 * i
        body.append(
            f'<rect x="{W - MR + 8}" y="{ly - 8}" width="10" height="10" fill="{color}"/>'
            f'<text x="{W - MR + 22}" y="{ly}" font-size="10">{escape(label[:16])}</text>'
        )
    return _frame(title, css, body, ylabel)


def bar_chart(
    title: str, bars: list[tuple[str, float, float]], *, ylabel: str = "", css: str = ""
) -> str:
    """Bars (label, value, error half-width) with error bars, scaled to the largest."""
    bars = [(lab, v, e if math.isfinite(e) else 0.0) for lab, v, e in bars if math.isfinite(v)]
    if not bars:
        return line_chart(title, {}, ylabel=ylabel, css=css)
    pw, ph = W - ML - 20, H - MT - MB - 40
    top = max(v + e for _, v, e in bars) or 1.0
    step = pw / len(bars)
    bw = max(4.0, step * 0.6)
    body = [f'<line x1="{ML}" y1="{MT + ph}" x2="{ML + pw}" y2="{MT + ph}" stroke="#444"/>']
    for t in _ticks(0.0, top):
        y = MT + ph - t / top * ph
        body.append(
            f'<text x="{ML - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{_fmt(t, top / 4)}</text>'
        )
    for i, (label, v, e) in enumerate(bars):
        cx = ML + step * (i + 0.5)
        y = MT + ph - v / top * ph
        body.append(
            f'<rect class="bar" data-label="{escape(label)}" x="{cx - bw / 2:.1f}" y="{y:.1f}" '
            f'width="{bw:.1f}" height="{MT + ph - y:.1f}" fill="{PALETTE[i % len(PALETTE)]}"/>'
        )
        if e > 0:
            ya, yb = MT + ph - (v - e) / top * ph, MT + ph - (v + e) / top * ph
            body.append(
                f'<line class="errorbar" x1="{cx:.1f}" y1="{ya:.1f}" x2="{cx:.1f}" y2="{yb:.1f}" '
                f'stroke="#000"/><line x1="{cx - 4:.1f}" y1="{yb:.1f}" x2="{cx + 4:.1f}" '
                f'y2="{yb:.1f}" stroke="#000"/><line x1="{cx - 4:.1f}" y1="{ya:.1f}" '
                f'x2="{cx + 4:.1f}" y2="{ya:.1f}" stroke="#000"/>'
            )
        body.append(
            f'<text x="{cx:.1f}" y="{MT + ph + 12}" font-size="10" text-anchor="end" '
            f'transform="rotate(-30 {cx:.1f} {MT + ph + 12})">{escape(label[:24])}</text>'
        )
    return _frame(title, css, body, ylabel)
