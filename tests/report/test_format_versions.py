"""Versioned formats: run `.data` files, the report JSON and the results store.

Each carries a version; readers take the current and older versions and refuse a newer
one with one line (docs/reports.md "Formats and versions").
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest
from clirun import milabench

from milabench.errors import UsageError
from milabench.events import DATA_FORMAT_VERSION, FORMAT_KEY, read_events
from milabench.history.store import MIGRATIONS, STORE_SCHEMA_VERSION, Store
from milabench.report.build import build_report
from milabench.report.render_tables import (
    REPORT_SCHEMA_VERSION,
    check_report_schema,
    load_report_json,
    report_dict,
)
from milabench.report.runs import read_run_dir
from milabench.sinks.runfiles import RunFileSink

sys.path.insert(0, str(Path(__file__).parent))
from synth import entry, write_file  # noqa: E402


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- .data files ------------------------------------------------------------------------
def test_versions_chosen():
    assert DATA_FORMAT_VERSION == 2 and REPORT_SCHEMA_VERSION == 2
    assert STORE_SCHEMA_VERSION == 2


def test_sink_writes_the_version_once_on_the_config_line(tmp_path: Path):
    sink = RunFileSink(tmp_path)
    sink.on_events("b.D0", [
        {"event": "config", "data": entry("b"), "pipe": None},
        {"event": "start", "data": {"command": ["x"], "time": 1.0}, "pipe": None},
        {"event": "data", "data": {"task": "train", "rate": 5.0}, "pipe": "data"},
        {"event": "end", "data": {"command": ["x"], "time": 2.0, "return_code": 0}},
    ])  # fmt: skip
    lines = _lines(tmp_path / "b.D0.data")
    assert lines[0]["event"] == "config" and lines[0][FORMAT_KEY] == DATA_FORMAT_VERSION
    assert [FORMAT_KEY in ev for ev in lines] == [True, False, False, False]
    assert "format_version" not in lines[0]["data"]  # the entry itself is untouched
    (fr,) = read_run_dir(tmp_path)
    assert fr.rates == [5.0] and fr.config["name"] == "b"


def test_real_run_files_carry_the_version(real_runs):
    files = sorted(real_runs["full"].glob("*.data"))
    assert files
    for path in files:
        first = _lines(path)[0]
        assert first["event"] == "config" and first[FORMAT_KEY] == DATA_FORMAT_VERSION


def test_files_without_a_version_are_version_1_and_read(tmp_path: Path):
    write_file(tmp_path, "bench.D0", entry("bench"), rates=[10, 11, 12])
    assert all(FORMAT_KEY not in ev for ev in read_events(tmp_path / "bench.D0.data"))
    (fr,) = read_run_dir(tmp_path)
    assert fr.rates == [10, 11, 12] and fr.has_end


def _newer_file(run_dir: Path, version: object = DATA_FORMAT_VERSION + 1) -> Path:
    path = write_file(run_dir, "bench.D0", entry("bench"), rates=[10, 11, 12])
    lines = _lines(path)
    lines[0][FORMAT_KEY] = version
    path.write_text("".join(json.dumps(ev) + "\n" for ev in lines))
    return path


def test_a_newer_file_is_refused(tmp_path: Path):
    path = _newer_file(tmp_path / "run")
    with pytest.raises(UsageError) as err:
        read_run_dir(tmp_path / "run")
    assert str(err.value) == (
        f"{path}: format version 3 is newer than this milabench reads (2): upgrade milabench"
    )
    assert err.value.exit_code == 2


def test_a_bad_version_is_refused(tmp_path: Path):
    path = _newer_file(tmp_path / "run", "two")
    with pytest.raises(UsageError, match="format version 'two' is not one this milabench"):
        list(read_events(path))


def test_report_cli_refuses_a_newer_file(tmp_path: Path):
    run_dir = tmp_path / "runs" / "r1"
    path = _newer_file(run_dir)
    write_file(run_dir, "other.D0", entry("other"), rates=[1, 2, 3])
    proc = milabench("report", "--runs", str(run_dir), "--base", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"milabench: error: {path}: format version 3 is newer than this milabench reads (2):"
        " upgrade milabench"
    ]
    assert proc.stdout == ""  # no partial report with wrong numbers


# -- report JSON ------------------------------------------------------------------------
def test_report_json_carries_its_schema_version(tmp_path: Path):
    write_file(tmp_path / "r", "bench.D0", entry("bench"), rates=[10, 11, 12])
    data = report_dict(build_report([tmp_path / "r"]))
    assert data["schema_version"] == REPORT_SCHEMA_VERSION
    proc = milabench("report", "--runs", str(tmp_path / "r"), "--format", "json",
                     "--base", str(tmp_path))  # fmt: skip
    out = json.loads(proc.stdout)
    assert out["schema_version"] == REPORT_SCHEMA_VERSION
    saved = tmp_path / "report.json"
    saved.write_text(proc.stdout)
    assert load_report_json(saved)["verdict"] == out["verdict"]


def test_report_json_versions_read_back(tmp_path: Path):
    assert check_report_schema({"verdict": "PASS"}, "old.json")["verdict"] == "PASS"  # v1
    assert check_report_schema({"schema_version": 2}, "r.json") == {"schema_version": 2}
    with pytest.raises(UsageError) as err:
        check_report_schema({"schema_version": 3}, "r.json")
    assert str(err.value) == (
        "r.json: schema version 3 is newer than this milabench reads (2): upgrade milabench"
    )
    with pytest.raises(UsageError, match="not a milabench report"):
        check_report_schema([], "r.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_report_json(bad)


# -- store ------------------------------------------------------------------------------
from store_schemas import V1_SCHEMA  # noqa: E402


def _v1_store(path: Path) -> None:
    """A store as the first release made it: no mb_meta, no history columns, one run."""
    conn = sqlite3.connect(path)
    with conn:
        for stmt in V1_SCHEMA:
            conn.execute(stmt)
        meta = json.dumps({"milabench": {"commit": "abc123"}})
        conn.execute("INSERT INTO mb_runs VALUES ('r1', 'old', 'h', 'host', 1.0, 2.0, 's', ?)",
                     (meta,))  # fmt: skip
        conn.execute("INSERT INTO mb_results VALUES ('r1', 'bench', 'host', 1.0, 3, 0, 1,"
                     " 100.0, 1.0, 0.5, 100.0, 100.0, 1.0, 'items/s', NULL)")  # fmt: skip
        conn.executemany("INSERT INTO mb_samples VALUES ('r1', 'bench', ?, ?)",
                         [(0, 99.0), (1, 100.0), (2, 101.0)])  # fmt: skip
    conn.close()


def _columns(path: Path, table: str) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    finally:
        conn.close()


def _recorded_version(path: Path) -> str | None:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT value FROM mb_meta WHERE key = 'schema_version'").fetchall()
        return rows[0][0] if rows else None
    finally:
        conn.close()


def test_old_store_is_migrated_in_place(tmp_path: Path):
    db = tmp_path / "results.sqlite"
    _v1_store(db)
    with Store(str(db)) as store:
        assert store.schema_version() == STORE_SCHEMA_VERSION
        assert store.count("mb_runs") == 1 and store.count("mb_samples") == 3
        assert store.samples("old") == {"bench": [99.0, 100.0, 101.0]}
        (point,) = store.series("bench")
        assert point.value == 100.0 and point.commit == "abc123"  # filled from meta
        assert point.ci_low is None and point.tags == []
        write_file(tmp_path / "new", "bench.D0", entry("bench"), rates=[90, 91, 92, 91])
        assert store.import_run(tmp_path / "new").added
        assert store.count("mb_runs") == 2
    assert _recorded_version(db) == str(STORE_SCHEMA_VERSION)
    for table, column, _ in MIGRATIONS:
        assert column in _columns(db, table)
    with Store(str(db)) as store:  # opening again changes nothing
        assert store.count("mb_runs") == 2 and store.schema_version() == 2


def test_new_store_records_its_version(tmp_path: Path):
    db = tmp_path / "results.sqlite"
    Store(f"sqlite:///{db}").close()
    assert _recorded_version(db) == "2"


def test_newer_store_is_refused(tmp_path: Path):
    db = tmp_path / "results.sqlite"
    Store(str(db)).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE mb_meta SET value = '3' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(UsageError) as err:
        Store(f"sqlite:///{db}")
    assert str(err.value) == (
        f"store sqlite:///{db}: schema version 3 is newer than this milabench reads (2):"
        " upgrade milabench"
    )
    assert err.value.exit_code == 2
    assert _recorded_version(db) == "3"  # left as it was
