"""The one stylesheet of every milabench page, and the colours of its charts.

The classes are the pages' vocabulary: `num` (a right-aligned number), the verdict and
status classes (`pass`/`good`, `fail`/`alert`, the fleet cell statuses `slow`,
`below-baseline`, `failed`, `skipped`, `missing`, `no-run`), `plots` (a row of charts),
`filters`, `swatch` and `muted`.
"""

from __future__ import annotations

STYLESHEET = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.4em}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px}
th{background:#f3f3f3;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f7f7f7;padding:8px;overflow-x:auto}a{color:#1f5fa8}
.pass,.good{color:#1a7f37}.fail,.alert{color:#c62828}.alert{font-weight:bold}
td.slow,td.below-baseline{background:#fde2e1}td.failed{background:#f9d0ce}
td.skipped,td.missing,td.no-run,.muted{color:#777}li.flag{margin:4px 0}.kind{font-weight:bold}
.plots{display:flex;flex-wrap:wrap;gap:8px}
.filters{margin:.8em 0;padding:.5em;background:#f6f6f6}.filters label{margin-right:1.2em}
.swatch{display:inline-block;width:.9em;height:.9em;vertical-align:middle}
"""

# Series colours, in order; `color(i)` cycles through them.
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
PASS_COLOR = "#1a7f37"
FAIL_COLOR = "#c62828"
NEUTRAL_COLOR = PALETTE[0]


def color(index: int) -> str:
    """The colour of the `index`-th series of a chart."""
    return PALETTE[index % len(PALETTE)]
