"""Tables (milabench/htmlkit/table.py): header, numeric columns, row and cell classes."""

from __future__ import annotations

from milabench.htmlkit.markup import el
from milabench.htmlkit.table import Cell, Row, status_class, table, verdict_class


def test_header_rows_and_numeric_columns():
    out = table(["bench", "rate", "note"], [["a<b", "1,600", "x"], ["c", "2", ""]],
                numeric=range(1, 2), class_="breakdown")  # fmt: skip
    lines = out.splitlines()
    assert lines[0] == '<table class="breakdown">'
    assert lines[1] == "<tr><th>bench</th><th>rate</th><th>note</th></tr>"
    assert lines[2] == '<tr><td>a&lt;b</td><td class="num">1,600</td><td>x</td></tr>'
    assert lines[3] == '<tr><td>c</td><td class="num">2</td><td></td></tr>'
    assert lines[-1] == "</table>"


def test_cells_and_rows_with_classes():
    rows = [
        Row([Cell("node0", header=True), Cell("8 SLOW", class_="slow", title="below <median>"),
             el("a", "link", href="b.html")], class_="filterable", attrs={"data-key": "k"}),
        [Cell("fleet median", header=True), Cell("10", class_=""), "ok"],
    ]  # fmt: skip
    out = table([], rows, numeric=(1,))
    assert out.count("<tr") == 2  # no header row without columns
    assert (
        '<tr class="filterable" data-key="k"><th>node0</th>'
        '<td class="num slow" title="below &lt;median&gt;">8 SLOW</td>'
        '<td><a href="b.html">link</a></td></tr>'
    ) in out
    assert '<tr><th>fleet median</th><td class="num">10</td><td>ok</td></tr>' in out


def test_status_classes():
    assert status_class("no run") == "no-run" and status_class("Timed out") == "timed-out"
    assert verdict_class(True) == "pass" and verdict_class(False) == "fail"
