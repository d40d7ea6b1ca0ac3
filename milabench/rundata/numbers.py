"""How numbers are printed for people: three significant digits, never "0.0".

A rate of 0.000851 TFLOPS printed with two decimals reads "0.00" and one of 12,345,678
items/s reads as a wall of digits; both hide what matters. Every human-facing output (the
terminal report, Markdown, HTML, the live dashboard) prints through `fmt_sig`, so the same
value reads the same everywhere. Machine formats (CSV, JSON) keep full precision.
"""

from __future__ import annotations

import math

MISSING = "-"


def fmt_sig(x: float | int | None, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits and thousands separators.

    0.000851 -> "0.000851", 12345 -> "12,300", 812.34 -> "812", 81.234 -> "81.2",
    1.5e-9 -> "1.50e-09", 0 -> "0", None / NaN -> "-", inf -> "inf".
    """
    if x is None or isinstance(x, bool):
        return MISSING
    try:
        value = float(x)
    except (TypeError, ValueError):
        return MISSING
    if math.isnan(value):
        return MISSING
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    # Rounding can carry into the next power of ten (999.6 -> 1,000): recompute once.
    rounded = round(value, digits - 1 - magnitude)
    if rounded != 0:
        magnitude = math.floor(math.log10(abs(rounded)))
    if magnitude < -5:
        return f"{value:.{digits - 1}e}"
    decimals = max(0, digits - 1 - magnitude)
    rounded = round(value, digits - 1 - magnitude)
    return f"{rounded:,.{decimals}f}"


def fmt_pct(x: float | None, digits: int = 3) -> str:
    """A percentage with `fmt_sig` digits and a ``%`` sign (``-`` when unknown)."""
    text = fmt_sig(x, digits)
    return text if text == MISSING else f"{text}%"


def fmt_bytes(x: float | int | None) -> str:
    """Bytes in binary units with 3 significant digits: ``1.23 GiB``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    value = float(x)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{fmt_sig(value)} {unit}"
        value /= 1024
    return MISSING  # unreachable


def fmt_seconds(x: float | None) -> str:
    """Seconds with 3 significant digits and an ``s``: ``6.12 s``."""
    text = fmt_sig(x)
    return text if text == MISSING else f"{text} s"


def fmt_duration(x: float | None) -> str:
    """Seconds in the unit that reads best, 3 significant digits: ``6.12 s``, ``520 ms``,
    ``12.0 µs``, ``850 ns`` (a step of 0.0000120 s is hard to read in seconds)."""
    text = fmt_sig(x)
    if text == MISSING or text in ("inf", "-inf") or float(x) == 0:
        return fmt_seconds(x)
    value = float(f"{float(x):.3g}")  # the unit follows the rounded value (999.6 µs: 1.00 ms)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(value) >= scale:
            return f"{fmt_sig(value / scale)} {unit}"
    return f"{fmt_sig(value / 1e-9)} ns"
