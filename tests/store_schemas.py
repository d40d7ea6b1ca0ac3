"""The results store's tables as the first release made them (schema version 1): the
migration tests open a store built with these."""

V1_SCHEMA = [
    """CREATE TABLE mb_runs (
        run_id TEXT PRIMARY KEY, name TEXT NOT NULL, content_hash TEXT NOT NULL,
        machine TEXT, started DOUBLE PRECISION, imported DOUBLE PRECISION,
        source TEXT, meta TEXT)""",
    """CREATE TABLE mb_results (
        run_id TEXT NOT NULL, bench TEXT NOT NULL, machine TEXT, started DOUBLE PRECISION,
        n INTEGER, fail INTEGER, ngpu INTEGER, perf DOUBLE PRECISION,
        std DOUBLE PRECISION, sem DOUBLE PRECISION, median DOUBLE PRECISION,
        score DOUBLE PRECISION, weight DOUBLE PRECISION, units TEXT, reason TEXT,
        PRIMARY KEY (run_id, bench))""",
    """CREATE TABLE mb_samples (
        run_id TEXT NOT NULL, bench TEXT NOT NULL, seq INTEGER NOT NULL,
        value DOUBLE PRECISION NOT NULL, PRIMARY KEY (run_id, bench, seq))""",
]
