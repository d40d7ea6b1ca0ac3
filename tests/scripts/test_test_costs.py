"""scripts/test_costs.py: the session's order table from a ``MILABENCH_TEST_CPU_LOG``
folder (tests/cputime.py's lines), as tests/concurrency.py reads it."""

from __future__ import annotations

import json
from pathlib import Path

import concurrency
from scriptmodule import load_script

costs = load_script("test_costs")


def _log(folder: Path, pid: int, *lines: tuple[str, float, float, float]) -> None:
    folder.mkdir(exist_ok=True)
    with open(folder / f"{pid}.jsonl", "a", encoding="utf-8") as out:
        for test, wall, own, children in lines:
            record = {"id": test, "start": 0.0, "wall": wall, "self": own, "children": children}
            out.write(json.dumps(record) + "\n")


def test_files_are_summed_over_workers_and_written_longest_first(tmp_path, capsys):
    log = tmp_path / "cpu"
    _log(log, 1, ("tests/a/test_x.py::test_one", 4.0, 0.5, 1.5),
         ("tests/b/test_y.py::test_one[p]", 30.0, 1.0, 20.0))  # fmt: skip
    _log(log, 2, ("tests/a/test_x.py::test_two", 8.0, 0.2, 3.0),
         ("tests/c/test_z.py::test_one", 2.0, 0.1, 0.0))  # fmt: skip
    assert costs.main([str(log)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["30.0", "21.0", "tests/b/test_y.py"]
    assert lines[2].split() == ["12.0", "5.2", "tests/a/test_x.py"]
    assert lines[-1].split()[:2] == ["44.0", "26.3"] and "3 files" in lines[-1]

    table = tmp_path / "file_costs.json"
    assert costs.main([str(log), "--write", str(table)]) == 0
    document = json.loads(table.read_text())
    # under --min (10 s of wall time) a file is left out: the session keeps its place
    assert document["files"] == {"tests/b/test_y.py": {"wall": 30, "cpu": 21},
                                 "tests/a/test_x.py": {"wall": 12, "cpu": 5}}  # fmt: skip
    assert list(document["files"]) == ["tests/b/test_y.py", "tests/a/test_x.py"]
    assert document["total"] == {"wall": 44, "cpu": 26}
    assert concurrency.file_costs(table) == {"tests/b/test_y.py": 30.0, "tests/a/test_x.py": 12.0}


def test_an_empty_folder_exits_2_and_a_broken_table_orders_nothing(tmp_path, capsys):
    (tmp_path / "cpu").mkdir()
    assert costs.main([str(tmp_path / "cpu")]) == 2
    assert "no MILABENCH_TEST_CPU_LOG line" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert concurrency.file_costs(broken) == {}
    assert concurrency.file_costs(tmp_path / "absent.json") == {}


def test_the_committed_table_names_files_that_exist():
    """A renamed or removed test file leaves the table: regenerate it (docs/testing.md)."""
    root = Path(concurrency.__file__).resolve().parents[1]
    table = concurrency.file_costs()
    assert table, concurrency.COSTS_FILE
    missing = [name for name in table if not (root / name).is_file()]
    assert not missing, f"{missing}: run scripts/test_costs.py again"
