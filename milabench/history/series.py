"""Stored results as series (one per benchmark, machine and suite) and their change points.

A series is every stored result of one benchmark on one machine with one suite file, in
run order; `milabench.history.changepoint.detect` finds its change points. A change point
in the bad direction (a lower rate) is an *alert*; an alert is *new* when the first run
after the change is among the last `new` runs of its series (so a nightly job reports a
regression the night it is first seen, not every night after), and *open* while no later
change point follows it in the series. `detect` needs `min_size` (3) values on each side of
a change, so a change is first seen when 3 runs follow it: `new` defaults to 3.
"""

from __future__ import annotations

import datetime
import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from milabench.formats import Renderers
from milabench.history.changepoint import ChangePoint, detect
from milabench.history.store import SeriesPoint, Store


@dataclass
class Series:
    """One benchmark on one machine with one suite file: its points and change points."""

    bench: str
    machine: str | None
    suite: str | None
    points: list[SeriesPoint]
    changes: list[ChangePoint] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.machine or '?'} / {self.suite or '?'}"

    @property
    def units(self) -> str | None:
        return next((p.units for p in reversed(self.points) if p.units), None)

    @property
    def tags(self) -> list[str]:
        out: list[str] = []
        for p in self.points:
            out += [t for t in p.tags if t not in out]
        return out


@dataclass
class Change:
    """A change point of a series, with the run it starts at (one row of the alerts table)."""

    bench: str
    machine: str | None
    suite: str | None
    change: float  # after/before - 1 (medians)
    before_median: float
    after_median: float
    p_value: float
    regression: bool
    run: str  # first run after the change
    index: int  # its position in the series
    started: float | None
    commit: str | None
    new: bool  # the first run after is among the last `new` runs of the series
    open: bool  # no later change point in the series

    @property
    def alert(self) -> bool:
        return self.regression

    def as_dict(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "machine": self.machine,
            "suite": self.suite,
            "change": _finite(self.change),
            "change_pct": _finite(round(100.0 * self.change, 2)),
            "before_median": _finite(self.before_median),
            "after_median": _finite(self.after_median),
            "p_value": self.p_value,
            "regression": self.regression,
            "run": self.run,
            "index": self.index,
            "date": iso_date(self.started),
            "commit": self.commit,
            "new": self.new,
            "open": self.open,
        }


def _finite(x: float) -> float | None:
    """JSON has no infinity (a change from a zero median): null instead."""
    return x if math.isfinite(x) else None


def iso_date(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


def short_date(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M")


def load(
    store: Store,
    *,
    benches: Iterable[str] | None = None,
    machine: str | None = None,
    suite: str | None = None,
    tag: str | None = None,
) -> list[Series]:
    """Every series of the store (or of `benches`), results without a rate left out."""
    out = []
    for bench in sorted(benches) if benches else store.benchmarks():
        groups: dict[tuple[str | None, str | None], list[SeriesPoint]] = {}
        for p in store.series(bench, machine=machine, suite=suite, tag=tag):
            if p.value is not None and math.isfinite(p.value):
                groups.setdefault((p.machine, p.suite), []).append(p)
        for (mach, suite_), points in sorted(groups.items(), key=lambda kv: str(kv[0])):
            out.append(Series(bench, mach, suite_, points))
    return out


def analyse(
    series: list[Series], *, min_effect: float = 0.05, alpha: float = 0.01, new: int = 3
) -> list[Change]:
    """Detect the change points of every series (stored in `Series.changes`)."""
    found = []
    for s in series:
        s.changes = detect([p.value for p in s.points], min_effect=min_effect, alpha=alpha)
        for i, cp in enumerate(s.changes):
            first = s.points[cp.index]
            found.append(Change(
                bench=s.bench, machine=s.machine, suite=s.suite, change=cp.change,
                before_median=cp.before_median, after_median=cp.after_median,
                p_value=cp.p_value, regression=cp.regression, run=first.run, index=cp.index,
                started=first.started, commit=first.commit,
                new=cp.index >= len(s.points) - max(new, 0), open=i == len(s.changes) - 1,
            ))  # fmt: skip
    return found


def trend(s: Series, last: int) -> float | None:
    """Latest value relative to the median of the last `last` values (None if < 2)."""
    values = [p.value for p in s.points[-last:] if p.value is not None]
    if len(values) < 2:
        return None
    median = statistics.median(values)
    return values[-1] / median - 1.0 if median else None


def fmt_num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    from milabench.rundata.numbers import fmt_sig

    return fmt_sig(x)


HEADER = ["benchmark", "machine", "suite", "change", "before", "after", "first run after",
          "date", "p-value", "new"]  # fmt: skip


def _cells(c: Change) -> list[str]:
    return [
        c.bench,
        c.machine or "-",
        c.suite or "-",
        f"{100.0 * c.change:+.1f}%",
        fmt_num(c.before_median),
        fmt_num(c.after_median),
        c.run,
        short_date(c.started),
        f"{c.p_value:.3f}",
        "NEW" if c.new and c.regression else "",
    ]


@dataclass(frozen=True)
class Alerts:
    """What the alerts table shows: the changes, how many series were searched, whether
    every change point is shown (`everything`) and the keys the JSON adds (`extra`)."""

    changes: list[Change]
    series: int = 0
    everything: bool = False
    extra: dict = field(default_factory=dict)


def _json(alerts: Alerts) -> str:
    return json.dumps({**alerts.extra, "alerts": [c.as_dict() for c in alerts.changes]}, indent=2)


def _table(alerts: Alerts, *, markdown: bool) -> str:
    what = "change point" if alerts.everything else "regression"
    if not alerts.changes:
        return f"No {what} in {alerts.series} series."
    rows = [HEADER] + [_cells(c) for c in alerts.changes]
    if markdown:
        lines = ["| " + " | ".join(r) + " |" for r in rows]
        lines.insert(1, "|" + "|".join("---" for _ in HEADER) + "|")
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
        lines = [" | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
                 for r in rows]  # fmt: skip
    n_new = sum(1 for c in alerts.changes if c.regression and c.new)
    lines.append("")
    lines.append(
        f"{len(alerts.changes)} {what}(s) in {alerts.series} series, {n_new} new regression(s)."
    )
    return "\n".join(lines)


_TABLE = {
    "text": partial(_table, markdown=False),
    "markdown": partial(_table, markdown=True),
    "json": _json,
}
# The formats of the alerts table (no HTML: the site is `milabench.history.site`); an
# unknown name renders text, as it always has (the CLI's choices never pass one).
RENDERERS: Renderers[Alerts] = Renderers(
    "history", ("text", "markdown", "json"), lambda: _TABLE, fallback="text"
)


def render(
    changes: list[Change],
    fmt: str,
    *,
    series: int = 0,
    everything: bool = False,
    extra: dict | None = None,
) -> str:
    """The alerts (or, `everything`, all change points) table: text, markdown or json."""
    return RENDERERS.render(Alerts(changes, series, everything, extra or {}), fmt)
