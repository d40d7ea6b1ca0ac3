"""Tables: a header row, then rows of cells, numbers right-aligned, status classes.

A row is a list of cells or a `Row` (the row's own class and attributes); a cell is
text, markup, or a `Cell` (its class, a tooltip, or a ``<th>`` row header). The columns
listed in `numeric` get class ``num`` (right-aligned, tabular figures) on their ``<td>``.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from milabench.htmlkit.markup import AttrValue, Child, Markup, el, join


@dataclass(frozen=True)
class Cell:
    """One cell with more than its content: `class_` (added to ``num``), a `title`
    (tooltip), `header` for a row header (``<th>``)."""

    content: Child
    class_: str = ""
    title: str | None = None
    header: bool = False


@dataclass(frozen=True)
class Row:
    """One row with its own class and attributes (``data-*`` for filters)."""

    cells: Sequence[Child | Cell]
    class_: str = ""
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)


def status_class(status: str) -> str:
    """The CSS class of a status word (``no run`` -> ``no-run``)."""
    return status.strip().lower().replace(" ", "-")


def verdict_class(ok: bool) -> str:
    """``pass`` or ``fail``: the class of a verdict line or a row."""
    return "pass" if ok else "fail"


def _cell(cell: Child | Cell, numeric: bool) -> Markup:
    if not isinstance(cell, Cell):
        cell = Cell(cell)
    classes = " ".join(c for c in ("num" if numeric and not cell.header else "", cell.class_) if c)
    return el("th" if cell.header else "td", cell.content, class_=classes or None,
              title=cell.title or None)  # fmt: skip


def table(columns: Sequence[Child], rows: Iterable[Sequence[Child | Cell] | Row], *,
          numeric: Container[int] = (), class_: str | None = None) -> Markup:  # fmt: skip
    """A ``<table>``: `columns` as the header row (none when empty), one ``<tr>`` per row."""
    lines = [el("tr", [el("th", c) for c in columns])] if columns else []
    for row in rows:
        if not isinstance(row, Row):
            row = Row(row)
        cells = [_cell(c, i in numeric) for i, c in enumerate(row.cells)]
        lines.append(el("tr", cells, class_=row.class_ or None, attrs=row.attrs))
    return el("table", "\n", join(lines, "\n"), "\n", class_=class_)
