"""Outliers: is a stored result more than `k` standard deviations from the ones before it?

The quick check of one result against its recent past (`milabench history --method
outliers`, and the line `milabench store import` prints for each value it adds): each
result of a benchmark is compared with the `window` results of the same machine before
it, and flagged when its `perf` lies more than `k` sample standard deviations from their
mean (at least 3 earlier results needed). Change points (`series`) look at a whole series
instead; this rule answers "is the latest run odd?" with no minimum number of runs after it.
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import asdict, dataclass
from functools import partial

from milabench.formats import Renderers
from milabench.history.store import ResultRow, Store

DEFAULT_K = 3.0
DEFAULT_WINDOW = 10
DEFAULT_LAST = 20
HEADER = ["run", "date", "machine", "n", "fail", "perf", "std%", "score", "flag"]


@dataclass(frozen=True)
class OutlierRow:
    """A stored result with its verdict against the results before it."""

    bench: str
    result: ResultRow
    flagged: bool
    zscore: float | None


def flag(value: float | None, history: list[float], k: float) -> tuple[bool, float | None]:
    """(is `value` more than k std devs from the mean of `history`?, its z-score)."""
    if value is None or len(history) < 3:
        return False, None
    m = math.fsum(history) / len(history)
    sd = math.sqrt(math.fsum((h - m) ** 2 for h in history) / (len(history) - 1))
    if sd == 0:
        return (value != m), (math.inf if value != m else 0.0)
    z = (value - m) / sd
    return abs(z) > k, z


def flag_rows(
    bench: str, rows: list[ResultRow], *, k: float = DEFAULT_K, window: int = DEFAULT_WINDOW
) -> list[OutlierRow]:
    """Each of `rows` (oldest first) flagged against the `window` earlier values of its
    own machine."""
    out: list[OutlierRow] = []
    seen: dict[str | None, list[float]] = {}
    for row in rows:
        prev = seen.setdefault(row.machine, [])
        flagged, z = flag(row.perf, prev[-window:], k)
        out.append(OutlierRow(bench, row, flagged, z))
        if row.perf is not None:
            prev.append(float(row.perf))
    return out


def outliers(
    store: Store,
    bench: str,
    *,
    last: int = DEFAULT_LAST,
    machine: str | None = None,
    k: float = DEFAULT_K,
    window: int = DEFAULT_WINDOW,
) -> list[OutlierRow]:
    """The last `last` results of `bench` (all with 0), oldest first, each flagged."""
    rows = flag_rows(bench, store.results(bench, machine), k=k, window=window)
    return rows[-last:] if last else rows


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M")


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def _cells(r: OutlierRow) -> list[str]:
    x = r.result
    return [x.run, _when(x.started), x.machine or "-", str(x.n), str(x.fail), _num(x.perf, ".2f"),
            _num(x.std, ".1f"), _num(x.score, ".2f"),
            f"OUTLIER ({r.zscore:+.1f} sd)" if r.flagged else ""]  # fmt: skip


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def _json(tables: dict[str, list[OutlierRow]]) -> str:
    doc = {
        "benchmarks": {
            bench: [
                {**asdict(r.result), "flagged": r.flagged, "zscore": _finite(r.zscore)}
                for r in rows
            ]
            for bench, rows in tables.items()
        },
        "flagged_latest": latest_flagged(tables),
    }
    return json.dumps(doc, indent=2) + "\n"


def _tables(tables: dict[str, list[OutlierRow]], *, markdown: bool) -> str:
    lines: list[str] = []
    for bench, rows in tables.items():
        cells = [HEADER] + [_cells(r) for r in rows]
        if markdown:
            lines += [f"### {bench}", "", "| " + " | ".join(HEADER) + " |",
                      "|" + "|".join(["---"] * len(HEADER)) + "|"]  # fmt: skip
            lines += ["| " + " | ".join(c) + " |" for c in cells[1:]]
        else:
            if len(tables) > 1:
                lines.append(f"== {bench}")
            widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
            lines += [" | ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip()
                      for c in cells]  # fmt: skip
        lines.append("")
    return "\n".join(lines[:-1]) + "\n"


_TABLE = {
    "text": partial(_tables, markdown=False),
    "markdown": partial(_tables, markdown=True),
    "json": _json,
}
# The formats of the outliers tables; an unknown name renders text, as it always has
# (the CLI's choices never pass one).
RENDERERS: Renderers[dict[str, list[OutlierRow]]] = Renderers(
    "history", ("text", "markdown", "json"), lambda: _TABLE, fallback="text"
)
FORMATS = RENDERERS.formats


def render(tables: dict[str, list[OutlierRow]], fmt: str = "text") -> str:
    """One table per benchmark (text: a `== bench` line before each when there are
    several), or JSON ``{"benchmarks": {bench: [row...]}, "flagged_latest": [bench...]}``."""
    return RENDERERS.render(tables, fmt)


def latest_flagged(tables: dict[str, list[OutlierRow]]) -> list[str]:
    """The benchmarks whose latest shown result is an outlier."""
    return [bench for bench, rows in tables.items() if rows and rows[-1].flagged]
