"""Results store: run folders -> rows in SQLite (stdlib) or any SQLAlchemy database.

One schema for every backend, plain SQL with named parameters (``:name``), which both
`sqlite3` and SQLAlchemy's `text()` understand; SQLAlchemy is imported only for URLs that
are not SQLite. A run's identity is its folder name plus a hash of its `.data` files, so
importing a run twice adds no rows. `Store.results` gives one benchmark's summary rows
(read by `milabench.history.outliers`) and `Store.series` every stored point of one
benchmark with its interval (read by `milabench.history.series`). The schema version is
kept in ``mb_meta``; an older store is migrated in place one step at a time (`STEPS`,
`MIGRATIONS`), a newer one refused in one line. The tables, identity and versions:
docs/reports.md "Results store" and "Formats and versions".
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milabench.errors import UsageError
from milabench.report.build import Report, build_report

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS mb_runs (
        run_id TEXT PRIMARY KEY, name TEXT NOT NULL, content_hash TEXT NOT NULL,
        machine TEXT, started DOUBLE PRECISION, imported DOUBLE PRECISION,
        source TEXT, meta TEXT, "commit" TEXT, suite TEXT)""",
    """CREATE TABLE IF NOT EXISTS mb_results (
        run_id TEXT NOT NULL, bench TEXT NOT NULL, machine TEXT, started DOUBLE PRECISION,
        n INTEGER, fail INTEGER, ngpu INTEGER, perf DOUBLE PRECISION,
        std DOUBLE PRECISION, sem DOUBLE PRECISION, median DOUBLE PRECISION,
        score DOUBLE PRECISION, weight DOUBLE PRECISION, units TEXT, reason TEXT,
        rate DOUBLE PRECISION, ci_low DOUBLE PRECISION, ci_high DOUBLE PRECISION, tags TEXT,
        PRIMARY KEY (run_id, bench))""",
    """CREATE TABLE IF NOT EXISTS mb_samples (
        run_id TEXT NOT NULL, bench TEXT NOT NULL, seq INTEGER NOT NULL,
        value DOUBLE PRECISION NOT NULL, PRIMARY KEY (run_id, bench, seq))""",
]

# The schema version this code writes and reads (older stores are migrated on open).
STORE_SCHEMA_VERSION = 2
META_TABLE = 'CREATE TABLE IF NOT EXISTS mb_meta ("key" TEXT PRIMARY KEY, "value" TEXT)'

# Columns of schema version 2 (the history feature): (table, column, SQL type). A version 1
# store gets them on open; `commit` is a keyword in SQLite, so it is always quoted.
MIGRATIONS = [
    ("mb_runs", "commit", "TEXT"),  # git commit of the benchmarked code (meta record)
    ("mb_runs", "suite", "TEXT"),  # file name of the run's suite (config record)
    ("mb_results", "rate", "DOUBLE PRECISION"),  # the benchmark's rate (report `rate`)
    ("mb_results", "ci_low", "DOUBLE PRECISION"),  # 95% interval of `rate`
    ("mb_results", "ci_high", "DOUBLE PRECISION"),
    ("mb_results", "tags", "TEXT"),  # the entry's tags, comma-joined
]


def content_hash(run_dir: Path) -> str:
    """sha256 over the names and bytes of the run's `.data` files, in name order."""
    h = hashlib.sha256()
    for p in sorted(Path(run_dir).glob("*.data")):
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class _Sqlite:
    """stdlib sqlite3 backend."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(path), timeout=30)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self.conn:
            yield self.conn

    def run(self, conn: Any, sql: str, params: dict | list[dict] | None = None) -> list[tuple]:
        if isinstance(params, list):
            conn.executemany(sql, params)
            return []
        return conn.execute(sql, params or {}).fetchall()

    def columns(self, conn: Any, table: str) -> set[str]:
        return {row[1] for row in conn.execute(f"PRAGMA table_info({table})").fetchall()}

    def close(self) -> None:
        self.conn.close()


class _SqlAlchemy:
    """Any other database through SQLAlchemy (optional dependency: `pip install milabench[store]`)."""

    def __init__(self, url: str):
        try:
            import sqlalchemy
        except ImportError:
            raise UsageError(
                f"store URL {_safe(url)} needs SQLAlchemy: pip install 'milabench[store]'"
            ) from None
        self.sa = sqlalchemy
        if url.startswith("postgresql://"):  # prefer psycopg 3 when installed
            try:
                import psycopg  # noqa: F401

                url = "postgresql+psycopg://" + url[len("postgresql://") :]
            except ImportError:
                pass
        try:
            self.engine = sqlalchemy.create_engine(url)
        except Exception as exc:
            raise UsageError(f"store URL {_safe(url)}: {exc}") from None

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        try:
            conn_cm = self.engine.begin()
            conn = conn_cm.__enter__()
        except self.sa.exc.OperationalError as exc:
            raise UsageError(f"cannot connect to the store: {str(exc).splitlines()[0]}") from None
        try:
            yield conn
        except BaseException as exc:
            conn_cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        conn_cm.__exit__(None, None, None)

    def run(self, conn: Any, sql: str, params: dict | list[dict] | None = None) -> list[tuple]:
        res = conn.execute(self.sa.text(sql), params or {})
        if isinstance(params, list) or not res.returns_rows:
            return []
        return [tuple(r) for r in res.fetchall()]

    def columns(self, conn: Any, table: str) -> set[str]:
        res = conn.execute(self.sa.text(f"SELECT * FROM {table} WHERE 1 = 0"))
        return set(res.keys())

    def close(self) -> None:
        self.engine.dispose()


def _safe(url: str) -> str:
    """URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
    return url


def default_url(base: Path) -> str:
    return f"sqlite:///{Path(base).absolute() / 'results.sqlite'}"


@dataclass
class ImportResult:
    name: str
    run_id: str
    added: bool
    benchmarks: int


@dataclass(frozen=True)
class ResultRow:
    """One stored result of a benchmark as the run report summed it up."""

    run: str  # run folder name
    started: float | None  # run start (epoch seconds)
    machine: str | None
    n: int
    fail: int
    perf: float | None
    std: float | None  # relative standard deviation, %
    score: float | None


class Store:
    """A results database opened from a URL (`sqlite:///path`, a bare path, or SQLAlchemy)."""

    def __init__(self, url: str):
        self.url = url
        if url.startswith("sqlite:///"):
            self.db: _Sqlite | _SqlAlchemy = _Sqlite(Path(url[len("sqlite:///") :]))
        elif "://" not in url:
            self.db = _Sqlite(Path(url))
        else:
            self.db = _SqlAlchemy(url)
        try:
            with self.db.transaction() as conn:
                self.db.run(conn, META_TABLE)
            version = self.schema_version()
            if version is not None and version > STORE_SCHEMA_VERSION:
                raise UsageError(
                    f"store {_safe(url)}: schema version {version} is newer than this"
                    f" milabench reads ({STORE_SCHEMA_VERSION}): upgrade milabench"
                )
            with self.db.transaction() as conn:
                for stmt in SCHEMA:
                    self.db.run(conn, stmt)
            for step in range((version or 1) + 1, STORE_SCHEMA_VERSION + 1):
                STEPS[step](self)
            if version != STORE_SCHEMA_VERSION:
                self._set_version(STORE_SCHEMA_VERSION)
        except BaseException:
            self.db.close()
            raise

    def schema_version(self) -> int | None:
        """The version recorded in ``mb_meta`` (None: none recorded, a version 1 store or
        a new one)."""
        with self.db.transaction() as conn:
            rows = self.db.run(
                conn, """SELECT "value" FROM mb_meta WHERE "key" = 'schema_version'"""
            )
        if not rows:
            return None
        try:
            return int(rows[0][0])
        except (TypeError, ValueError):
            raise UsageError(
                f"store {_safe(self.url)}: schema version {rows[0][0]!r} is not a number"
            ) from None

    def _set_version(self, version: int) -> None:
        params = {"v": str(version)}
        update = """UPDATE mb_meta SET "value" = :v WHERE "key" = 'schema_version'"""
        try:
            with self.db.transaction() as conn:
                if self.db.run(conn, """SELECT 1 FROM mb_meta WHERE "key" = 'schema_version'"""):
                    self.db.run(conn, update, params)
                else:
                    self.db.run(
                        conn,
                        """INSERT INTO mb_meta ("key", "value") VALUES ('schema_version', :v)""",
                        params,
                    )
        except Exception:  # another process recorded it meanwhile
            with self.db.transaction() as conn:
                self.db.run(conn, update, params)

    def _migrate(self) -> None:
        """Version 1 -> 2: add the `MIGRATIONS` columns a store made before lacks."""
        with self.db.transaction() as conn:
            have = {t: self.db.columns(conn, t) for t in ("mb_runs", "mb_results")}
        added = []
        for table, column, kind in MIGRATIONS:
            if column in have[table]:
                continue
            try:  # one transaction each: a failed statement aborts a PostgreSQL transaction
                with self.db.transaction() as conn:
                    self.db.run(conn, f'ALTER TABLE {table} ADD COLUMN "{column}" {kind}')
                added.append(column)
            except Exception:
                with self.db.transaction() as conn:  # another process added it meanwhile
                    if column not in self.db.columns(conn, table):
                        raise
        if "commit" in added:  # the commit is in the stored meta record: fill it in
            with self.db.transaction() as conn:
                rows = self.db.run(conn, "SELECT run_id, meta FROM mb_runs")
                updates = [{"r": r, "c": c} for r, m in rows if (c := _meta_commit(m))]
                if updates:
                    self.db.run(conn, 'UPDATE mb_runs SET "commit" = :c WHERE run_id = :r',
                                updates)  # fmt: skip

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self, table: str) -> int:
        assert table in ("mb_runs", "mb_results", "mb_samples")
        with self.db.transaction() as conn:
            return int(self.db.run(conn, f"SELECT COUNT(*) FROM {table}")[0][0])

    def import_run(self, run_dir: Path, report: Report | None = None) -> ImportResult:
        """Add a run folder's results (no-op when the same content is already stored)."""
        run_dir = Path(run_dir)
        if not run_dir.is_dir():
            raise UsageError(f"{run_dir}: no such run folder")
        if not any(run_dir.glob("*.data")):
            raise UsageError(f"{run_dir}: no .data files, nothing to import")
        name = run_dir.name
        digest = content_hash(run_dir)
        run_id = hashlib.sha256(f"{name}\0{digest}".encode()).hexdigest()[:32]
        with self.db.transaction() as conn:
            if self.db.run(conn, "SELECT 1 FROM mb_runs WHERE run_id = :r", {"r": run_id}):
                return ImportResult(name, run_id, False, 0)
        report = report or build_report([run_dir])
        machine = report.system.get("hostname")
        files = [fr for br in report.benchmarks for fr in br.files]
        started = min((fr.start_time for fr in files if fr.start_time), default=None)
        meta = next((fr.meta for fr in files if fr.meta), None)
        config_file = next((fr.entry.config_file for fr in files
                            if fr.entry.config_file), None)  # fmt: skip
        results, samples = [], []
        for br in report.benchmarks:
            if br.phase != "run":
                continue
            s = br.summary
            results.append({
                "run_id": run_id, "bench": br.name, "machine": machine, "started": started,
                "n": br.n, "fail": br.fail, "ngpu": br.ngpu, "perf": _clean(br.perf) if s else None,
                "std": _clean(s.std_pct) if s else None, "sem": _clean(s.sem_pct) if s else None,
                "median": _clean(s.median) if s else None, "score": _clean(br.score),
                "weight": br.effective_weight, "units": br.units, "reason": br.reason,
                "rate": _clean(br.raw_rate) if s else None, "ci_low": _clean(br.ci_low),
                "ci_high": _clean(br.ci_high), "tags": _tags(br),
            })  # fmt: skip
            samples += [
                {"run_id": run_id, "bench": br.name, "seq": i, "value": v}
                for i, v in enumerate(br.samples)
                if math.isfinite(v)
            ]
        with self.db.transaction() as conn:
            if self.db.run(conn, "SELECT 1 FROM mb_runs WHERE run_id = :r", {"r": run_id}):
                return ImportResult(name, run_id, False, 0)  # a concurrent import won
            self.db.run(
                conn,
                "INSERT INTO mb_runs (run_id, name, content_hash, machine, started, imported,"
                ' source, meta, "commit", suite) VALUES (:run_id, :name, :hash, :machine,'
                " :started, :imported, :source, :meta, :commit, :suite)",
                {
                    "run_id": run_id,
                    "name": name,
                    "hash": digest,
                    "machine": machine,
                    "started": started,
                    "imported": time.time(),
                    "source": str(run_dir.absolute()),
                    "meta": json.dumps(meta, default=str),
                    "commit": _meta_commit(meta),
                    "suite": Path(str(config_file)).name if config_file else None,
                },  # fmt: skip
            )
            if results:
                self.db.run(
                    conn,
                    "INSERT INTO mb_results (run_id, bench, machine, started, n, fail, ngpu, perf,"
                    " std, sem, median, score, weight, units, reason, rate, ci_low, ci_high, tags)"
                    " VALUES (:run_id, :bench, :machine, :started, :n, :fail, :ngpu, :perf, :std,"
                    " :sem, :median, :score, :weight, :units, :reason, :rate, :ci_low, :ci_high,"
                    " :tags)",
                    results,
                )
            if samples:
                self.db.run(
                    conn,
                    "INSERT INTO mb_samples (run_id, bench, seq, value)"
                    " VALUES (:run_id, :bench, :seq, :value)",
                    samples,
                )
        return ImportResult(name, run_id, True, len(results))

    def run_names(self) -> list[str]:
        with self.db.transaction() as conn:
            return [r[0] for r in self.db.run(conn, "SELECT name FROM mb_runs ORDER BY started")]

    def samples(self, run_name: str) -> dict[str, list[float]]:
        """Rate samples per benchmark of the latest stored run with that name."""
        with self.db.transaction() as conn:
            rows = self.db.run(
                conn,
                "SELECT run_id FROM mb_runs WHERE name = :n ORDER BY imported DESC",
                {"n": run_name},
            )
            if not rows:
                raise UsageError(f"store {_safe(self.url)}: no stored run named '{run_name}'")
            data = self.db.run(
                conn,
                "SELECT bench, value FROM mb_samples WHERE run_id = :r ORDER BY bench, seq",
                {"r": rows[0][0]},
            )
        out: dict[str, list[float]] = {}
        for bench, value in data:
            out.setdefault(bench, []).append(float(value))
        return out

    def results(self, bench: str, machine: str | None = None) -> list[ResultRow]:
        """Every stored result of `bench` (of one machine when given), oldest first (run
        start, then import time)."""
        sql = (
            "SELECT r.name, x.started, x.machine, x.n, x.fail, x.perf, x.std, x.score"
            " FROM mb_results x JOIN mb_runs r ON r.run_id = x.run_id WHERE x.bench = :b"
        )
        params: dict[str, Any] = {"b": bench}
        if machine:
            sql += " AND x.machine = :m"
            params["m"] = machine
        sql += " ORDER BY x.started, r.imported"
        with self.db.transaction() as conn:
            rows = self.db.run(conn, sql, params)
        return [
            ResultRow(name, started, mach, int(n or 0), int(fail or 0), perf, std, score)
            for name, started, mach, n, fail, perf, std, score in rows
        ]

    def run_benchmarks(self, run_id: str) -> list[str]:
        """The benchmarks one stored run has results for."""
        with self.db.transaction() as conn:
            rows = self.db.run(conn, "SELECT bench FROM mb_results WHERE run_id = :r",
                               {"r": run_id})  # fmt: skip
        return [r[0] for r in rows]

    def benchmarks(self) -> list[str]:
        """Names of the benchmarks with at least one stored result, sorted."""
        with self.db.transaction() as conn:
            rows = self.db.run(conn, "SELECT DISTINCT bench FROM mb_results")
        return sorted(r[0] for r in rows)

    def series(
        self,
        bench: str,
        machine: str | None = None,
        suite: str | None = None,
        tag: str | None = None,
    ) -> list[SeriesPoint]:
        """Every stored result of `bench`, oldest first (run start, then import time).

        `value` is the benchmark's rate with its 95% interval; results stored before those
        columns existed give their `perf` and no interval. Filters: machine (hostname),
        suite (file name) and tag (one of the entry's tags); None keeps everything.
        """
        sql = (
            'SELECT r.name, r.run_id, x.started, x.machine, r.suite, r."commit", x.tags,'
            " x.rate, x.perf, x.ci_low, x.ci_high, x.n, x.fail, x.units, r.imported"
            " FROM mb_results x JOIN mb_runs r ON r.run_id = x.run_id WHERE x.bench = :b"
        )
        params: dict[str, Any] = {"b": bench}
        if machine is not None:
            sql += " AND x.machine = :m"
            params["m"] = machine
        if suite is not None:
            sql += " AND r.suite = :s"
            params["s"] = suite
        sql += " ORDER BY x.started, r.imported"
        with self.db.transaction() as conn:
            rows = self.db.run(conn, sql, params)
        out = []
        for name, run_id, started, mach, suite_, commit, tags, rate, perf, lo, hi, n, fail, units, imported in rows:  # fmt: skip
            tag_list = [t for t in (tags or "").split(",") if t]
            if tag is not None and tag not in tag_list:
                continue
            value = rate if rate is not None else perf
            if rate is None:  # an interval is only meaningful around the rate it belongs to
                lo = hi = None
            out.append(SeriesPoint(
                run=name, run_id=run_id, started=started if started is not None else imported,
                machine=mach, suite=suite_, commit=commit, tags=tag_list,
                value=None if value is None else float(value),
                ci_low=None if lo is None else float(lo), ci_high=None if hi is None else float(hi),
                n=int(n or 0), fail=int(fail or 0), units=units,
            ))  # fmt: skip
        return out


# Migration steps: STEPS[v] brings a version v-1 store to version v (in place, idempotent).
STEPS = {2: Store._migrate}


@dataclass
class SeriesPoint:
    """One stored result of a benchmark, as `Store.series` returns it."""

    run: str  # run folder name
    run_id: str
    started: float | None  # run start (epoch seconds); import time when unknown
    machine: str | None
    suite: str | None
    commit: str | None
    tags: list[str]
    value: float | None  # the rate (None when the benchmark measured nothing)
    ci_low: float | None
    ci_high: float | None
    n: int
    fail: int
    units: str | None


def _meta_commit(meta: Any) -> str | None:
    """The git commit of the benchmarked code in a `meta` record (dict or its JSON)."""
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    if not isinstance(meta, dict):
        return None
    tool = meta.get("milabench")
    commit = (tool.get("commit") if isinstance(tool, dict) else None) or meta.get("commit")
    return commit if isinstance(commit, str) and commit else None


def _tags(br: Any) -> str | None:
    """The entry's tags (config record `tags`), comma-joined in order, or None."""
    tags: list[str] = []
    for fr in br.files:
        for t in fr.entry.tags:
            if str(t) not in tags:
                tags.append(str(t))
    return ",".join(tags) or None
