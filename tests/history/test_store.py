"""Results store: idempotent imports, outlier flags (`milabench history --method outliers`),
SQLite and PostgreSQL."""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from systemtools import install, unavailable

from milabench.history.outliers import flag, outliers
from milabench.history.store import Store

from ..report.synth import entry, write_file

TABLES = ("mb_runs", "mb_results", "mb_samples")


def make_runs(root: Path, perfs: list[float]) -> list[Path]:
    """One run folder per value, started one hour apart, rates around that value."""
    dirs = []
    for i, p in enumerate(perfs):
        d = root / f"run{i:02d}"
        write_file(d, "bench.D0", entry("bench"), rates=[p - 1, p, p + 1, p, p - 0.5, p + 0.5],
                   t0=1_700_000_000 + 3600 * i)  # fmt: skip
        dirs.append(d)
    return dirs


def check_store(url: str, root: Path) -> None:
    dirs = make_runs(root, [100, 101, 99, 100.5, 99.5, 70])
    with Store(url) as store:
        results = [store.import_run(d) for d in dirs]
        assert all(r.added for r in results)
        counts = [store.count(t) for t in TABLES]
        assert counts == [6, 6, 6 * 4]  # 6 samples per run, trimmed to 4
        assert not any(store.import_run(d).added for d in dirs)  # idempotent
        assert [store.count(t) for t in TABLES] == counts
        hist = outliers(store, "bench", last=10)
        assert [h.result.run for h in hist] == [d.name for d in dirs]
        assert [h.flagged for h in hist] == [False] * 5 + [True]
        assert hist[-1].zscore < -3
        assert store.samples("run05")["bench"] == [69.5, 70.0, 70.0, 70.5]
    # a run that changed (more data) is a new run
    write_file(dirs[0], "bench.D1", entry("bench"), rates=[100, 100, 100])
    with Store(url) as store:
        assert store.import_run(dirs[0]).added
        assert store.count("mb_runs") == 7


def test_sqlite_store(tmp_path: Path):
    check_store(f"sqlite:///{tmp_path / 'db' / 'results.sqlite'}", tmp_path / "runs")


def test_flag_rule():
    assert flag(130.0, [100, 101, 99, 100], 3.0)[0]
    assert not flag(101.5, [100, 101, 99, 100], 3.0)[0]
    assert flag(50.0, [100, 101], 3.0) == (False, None)  # too little history


def test_cli_history_check_exit(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    dirs = make_runs(tmp_path / "runs", [100, 101, 99, 100, 40])
    run = [sys.executable, "-m", "milabench", "store"]
    proc = subprocess.run(
        [*run, "import", *map(str, dirs), "--url", url], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "! bench: perf 40.0 is" in proc.stdout
    history = [sys.executable, "-m", "milabench", "history", "--method", "outliers"]
    proc = subprocess.run([*history, "--bench", "bench", "--url", url, "--check"],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 1 and "OUTLIER" in proc.stdout.splitlines()[-1]
    proc = subprocess.run([*history, "--bench", "bench", "--url", url], capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 0 and "OUTLIER" in proc.stdout  # flagged, not checked
    proc = subprocess.run([*history, "--bench", "nope", "--url", url], capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 2 and "no stored result for benchmark(s): nope" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([*run, "import", str(tmp_path / "empty"), "--url", url],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and "no .data files" in proc.stderr


def test_history_outliers_of_every_benchmark_and_options_of_one_method(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    dirs = make_runs(tmp_path / "runs", [100, 101, 99, 100, 40])
    write_file(dirs[-1], "other.D0", entry("other"), rates=[10, 11, 10, 11],
               t0=1_700_000_000 + 3600 * 4)  # fmt: skip
    with Store(url) as store:
        for d in dirs:
            store.import_run(d)
    history = [sys.executable, "-m", "milabench", "history", "--method", "outliers", "--url", url]
    proc = subprocess.run([*history, "--format", "json", "--check"], capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert sorted(doc["benchmarks"]) == ["bench", "other"]
    assert doc["flagged_latest"] == ["bench"]
    assert [r["run"] for r in doc["benchmarks"]["bench"]] == [d.name for d in dirs]
    assert doc["benchmarks"]["bench"][-1]["zscore"] < -3
    proc = subprocess.run([*history, "--last", "2"], capture_output=True, text=True)
    assert proc.returncode == 0 and "== bench" in proc.stdout and "== other" in proc.stdout
    bench_table = proc.stdout.split("== other")[0].splitlines()
    assert [ln.split()[0] for ln in bench_table if ln.startswith("run0")] == ["run03", "run04"]
    proc = subprocess.run([*history, "--bench", "bench", "--format", "markdown"],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("### bench\n")
    assert "| run04 |" in proc.stdout and "OUTLIER" in proc.stdout.splitlines()[-1]
    # an option of the other method is refused, never ignored
    proc = subprocess.run([*history, "--output", str(tmp_path / "site")], capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 2
    assert "--output: only with --method changepoints" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "milabench", "history", "--url", url, "--k", "2"],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and "--k: only with --method outliers" in proc.stderr


def _pg_bin() -> Path | None:
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True):
        return Path(cand).parent
    return None


@pytest.fixture(scope="session")
def postgres() -> str:
    """A private PostgreSQL cluster on a unix socket, run as the `postgres` user."""
    pytest.importorskip("sqlalchemy", reason="SQLAlchemy (milabench[store]) is not installed")
    pytest.importorskip("psycopg", reason="psycopg (milabench[store]) is not installed")
    bindir = _pg_bin()
    if bindir is None:
        why = install(["postgresql"])
        bindir = _pg_bin()
        if bindir is None:
            unavailable(f"PostgreSQL server (Debian package postgresql) not installed: {why}")
    user = "postgres"
    try:
        import pwd

        pwd.getpwnam(user)
    except KeyError:
        unavailable("no 'postgres' system user to run the server as (Debian's postgresql adds it)")
    # pytest's temp root is private to root (0700): the server user needs its own folder
    root = Path(tempfile.mkdtemp(prefix="milabench-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    os.chmod(root, 0o755)
    shutil.chown(root, user)
    shutil.chown(sock, user)
    as_pg = ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([*as_pg, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U",
                           user], capture_output=True, text=True)  # fmt: skip
    if proc.returncode:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"initdb failed: {proc.stderr.strip()[-300:]}")
    opts = f"-k {sock} -p {port} -c listen_addresses=''"
    ctl = [*as_pg, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w"]
    proc = subprocess.run([*ctl, "-o", opts, "start"], capture_output=True, text=True)
    if proc.returncode:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"PostgreSQL did not start: {proc.stderr.strip()[-300:]}")
    try:
        yield f"postgresql://{user}@/postgres?host={sock}&port={port}"
    finally:
        subprocess.run([*ctl, "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_postgresql_store(postgres: str, tmp_path: Path):
    check_store(postgres, tmp_path / "runs")
    proc = subprocess.run([sys.executable, "-m", "milabench", "history", "--method", "outliers",
                           "--bench", "bench", "--url", postgres], capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 0 and "run05" in proc.stdout and "OUTLIER" in proc.stdout


def test_bad_url_is_a_user_error(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "milabench", "store", "runs", "--url",
                           "postgresql://nobody@/x?host=/nonexistent&port=1"],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "cannot connect to the store" in proc.stderr
