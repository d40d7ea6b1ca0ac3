"""docs/parity.md has one row per entry of config/standard.yaml, names no other entry,
and gives every row a verdict of ``same`` or ``different: <reason>``.

The parity tables are the Markdown tables whose last header cell is ``verdict``; a row
of such a table starts with the entry name in backticks. The entries are those of the
standard suite as `load_suite` resolves it on a fake 8-GPU CUDA node (private ``_``
templates excluded, disabled entries included).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from milabench.config import load_suite

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "parity.md"
SUITE = ROOT / "config" / "standard.yaml"
OPEN_DIFFERENCES = "## Open differences, by entry"

NAME_CELL = re.compile(r"^`([^`]+)`$")


def cells(line: str) -> list[str]:
    """The cells of a Markdown table line (``| a | b |`` -> ``["a", "b"]``)."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parity_rows(text: str) -> list[tuple[str, str, int]]:
    """(entry, verdict, line number) of every row of the tables whose header ends with
    a ``verdict`` column."""
    rows = []
    in_parity_table = False
    previous_was_table = False
    for number, line in enumerate(text.splitlines(), start=1):
        is_table = line.lstrip().startswith("|")
        if is_table and not previous_was_table:  # a header line starts a table
            in_parity_table = cells(line)[-1].lower() == "verdict"
        elif is_table and in_parity_table:
            row = cells(line)
            match = NAME_CELL.match(row[0])
            if match:
                rows.append((match.group(1), row[-1], number))
        previous_was_table = is_table
    return rows


@pytest.fixture(scope="module")
def entries(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    with pytest.MonkeyPatch.context() as patch:
        for key in ("MILABENCH_CONFIG", "MILABENCH_SYSTEM", "MILABENCH_GPU_ARCH"):
            patch.delenv(key, raising=False)
        patch.setenv("MILABENCH_FAKE_GPUS", "cuda:8:81920")
        suite = load_suite(SUITE, base=tmp_path_factory.mktemp("base"))
    names = set(suite.all_entries)
    assert names and not any(name.startswith("_") for name in names)
    return names


@pytest.fixture(scope="module")
def text() -> str:
    return DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def rows(text: str) -> list[tuple[str, str, int]]:
    found = parity_rows(text)
    assert found, f"{DOC}: no table with a 'verdict' column"
    return found


def test_every_entry_has_a_row(entries: set[str], rows: list) -> None:
    missing = sorted(entries - {name for name, _, _ in rows})
    assert not missing, f"{DOC}: no row for {', '.join(missing)}"


def test_every_row_names_an_entry_once(entries: set[str], rows: list) -> None:
    unknown = [f"`{name}` (line {n})" for name, _, n in rows if name not in entries]
    assert not unknown, f"{DOC}: rows for entries {SUITE.name} does not have: {unknown}"
    seen: dict[str, int] = {}
    for name, _, n in rows:
        assert name not in seen, f"{DOC}: `{name}` has two rows (lines {seen[name]} and {n})"
        seen[name] = n


def test_verdicts_are_same_or_different_with_a_reason(rows: list) -> None:
    bad = [
        f"`{name}` (line {n}): {verdict!r}"
        for name, verdict, n in rows
        if not (
            verdict == "same"
            or (verdict.startswith("different:") and verdict[len("different:") :].strip())
        )
    ]
    assert not bad, f"{DOC}: verdicts must be 'same' or 'different: <reason>': {bad}"


def test_every_different_entry_is_in_the_open_differences(text: str, rows: list) -> None:
    assert OPEN_DIFFERENCES in text, f"{DOC}: no '{OPEN_DIFFERENCES}' section"
    section = text.split(OPEN_DIFFERENCES, 1)[1]
    listed = set(re.findall(r"`([^`]+)`", section))
    missing = [name for name, verdict, _ in rows if verdict != "same" and name not in listed]
    assert not missing, f"{DOC}: '{OPEN_DIFFERENCES}' says nothing of {', '.join(missing)}"


def test_the_parser_reads_only_parity_tables() -> None:
    sample = "\n".join(
        [
            "| entry | what |",
            "|---|---|",
            "| `x` | not a parity table |",
            "",
            "| entry | model | verdict |",
            "|---|---|---|",
            "| `a` | m | same |",
            "| **group** | | |",
            "| `b` | m | different: a reason |",
        ]
    )
    assert parity_rows(sample) == [("a", "same", 7), ("b", "different: a reason", 9)]
