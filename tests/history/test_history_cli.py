"""`milabench history` on real stored runs: change points, exit codes, notify, migration.

The runs are real (`milabench run` of a paced benchmark, `milabench store import` into
SQLite): 30 nights with a 10% drop from night20 on, and 30 nights without a change
(tests/history/nightly_runs.py, made once per test session).
"""

from __future__ import annotations

import http.server
import json
import re
import socket
import sqlite3
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from nightly_runs import NightlyRuns, milabench, nightly_runs  # noqa: E402

from milabench.history.store import Store  # noqa: E402
from milabench.machine.facts import git_head  # noqa: E402

COMMIT = git_head(Path(__file__).resolve().parents[2])

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> NightlyRuns:
    return nightly_runs(tmp_path_factory)


def table_rows(markdown: str) -> list[list[str]]:
    """Data rows of the Markdown table (header and separator left out)."""
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]


def test_planted_drop_is_one_new_alert(runs: NightlyRuns, tmp_path: Path):
    site = tmp_path / "site"
    proc = milabench("history", "--url", runs.drop_url, "--format", "markdown", "--new", "10",
                     "--output", str(site))  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = table_rows(proc.stdout)
    assert len(rows) == 1, proc.stdout
    bench, machine, suite, change, before, after, run, date, p, new = rows[0]
    assert (bench, suite, run, new) == ("paced", "suite.yaml", "night20", "NEW")
    assert re.fullmatch(r"-(9\.\d|10\.\d)%", change), change
    assert float(p) <= 0.01
    assert "1 regression(s) in 1 series, 1 new regression(s)." in proc.stdout
    assert (site / "index.html").is_file() and (site / "bench-paced.html").is_file()
    assert f"site: {site.absolute()}/index.html" in proc.stderr


def test_alert_is_new_only_the_night_it_is_first_seen(runs: NightlyRuns, tmp_path: Path):
    # The nightly job, night by night: import the night's run, then `milabench history`.
    url = f"sqlite:///{tmp_path / 'nightly.sqlite'}"
    codes, seen = [], []
    for night in runs.night[:26]:
        assert milabench("store", "import", str(night), "--url", url).returncode == 0
        proc = milabench("history", "--url", url, "--format", "json")
        codes.append(proc.returncode)
        seen.append([a["run"] for a in json.loads(proc.stdout)["alerts"]])
    assert codes[:20] == [0] * 20 and seen[:20] == [[]] * 20  # before the drop
    first = next(i for i, s in enumerate(seen) if s)  # the night the drop is first seen
    assert 21 <= first <= 23, seen  # it takes a few runs after it (min_size 3)
    assert codes[first] == 1, (codes, seen)  # that night fails...
    assert codes[first + 3 :] == [0] * len(codes[first + 3 :]), (codes, seen)  # ...later ones pass
    assert seen[-1] == ["night20"]  # with more runs after it, the change sits at night20
    # on all 30 runs the alert is still there, open but no longer new
    proc = milabench("history", "--url", runs.drop_url, "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    (alert,) = doc["alerts"]
    assert alert["run"] == "night20" and alert["index"] == 20 and alert["regression"]
    assert not alert["new"] and alert["open"] and doc["new_alerts"] == 0
    assert -0.12 < alert["change"] < -0.08 and alert["p_value"] <= 0.01
    assert alert["before_median"] > alert["after_median"]
    # the commit of the checkout that made the runs (None when it is not a git checkout)
    assert (alert["commit"] or None) == COMMIT and alert["date"].startswith("20")
    # --new 10 reaches back to night20
    proc = milabench("history", "--url", runs.drop_url, "--format", "json", "--new", "10")
    assert proc.returncode == 1 and json.loads(proc.stdout)["alerts"][0]["new"]
    with Store(runs.drop_url) as store:  # time order is run order
        assert [p.run for p in store.series("paced")] == [r.name for r in runs.night]


def test_no_change_no_alert(runs: NightlyRuns):
    proc = milabench("history", "--url", runs.flat_url, "--format", "markdown", "--all",
                     "--new", "10")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert table_rows(proc.stdout) == []
    assert "No change point in 1 series." in proc.stdout
    proc = milabench("history", "--url", runs.flat_url)
    assert proc.returncode == 0 and "No regression in 1 series." in proc.stdout


def test_text_format_and_filters(runs: NightlyRuns):
    proc = milabench("history", "--url", runs.drop_url, "--all", "--tag", "nightly")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split(" | ")[0].strip() == "benchmark" and "night20" in lines[1]
    proc = milabench("history", "--url", runs.drop_url, "--tag", "no-such-tag")
    assert proc.returncode == 2 and "no stored result matches" in proc.stderr
    proc = milabench("history", "--url", runs.drop_url, "--bench", "nope")
    assert proc.returncode == 2 and "nope" in proc.stderr
    with Store(runs.drop_url) as store:
        assert len(store.series("paced", tag="cpu", suite="suite.yaml")) == 30
        assert store.series("paced", suite="other.yaml") == []
        pts = store.series("paced", machine=store.series("paced")[0].machine)
    assert len(pts) == 30 and all(sorted(p.tags) == ["cpu", "nightly"] for p in pts)
    assert all(p.ci_low < p.value < p.ci_high for p in pts)
    assert all((p.commit or None) == COMMIT and p.suite == "suite.yaml" for p in pts)


class _Hook(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, dict]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hook():
    _Hook.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Hook.received
    finally:
        server.shutdown()
        server.server_close()


def test_notify_posts_new_alerts(runs: NightlyRuns, hook, tmp_path: Path):
    url, received = hook
    # no new alert (default --new 3): nothing is posted
    proc = milabench("history", "--url", runs.drop_url, "--notify", f"{url}/hook?token=s3cret")
    assert proc.returncode == 0 and received == [], proc.stderr
    # a new alert: posted, with the site folder
    proc = milabench("history", "--url", runs.drop_url, "--new", "10", "--output",
                     str(tmp_path / "site"), "--notify", f"{url}/hook?token=s3cret")  # fmt: skip
    assert proc.returncode == 1 and "warning" not in proc.stderr, proc.stderr
    ((path, ctype, body),) = received
    assert path == "/hook?token=s3cret" and ctype == "application/json"
    assert set(body) == {"alerts", "site", "generated"}
    assert body["site"] == str((tmp_path / "site").absolute())
    (alert,) = body["alerts"]
    assert alert["bench"] == "paced" and alert["run"] == "night20" and alert["new"]
    # --notify-always posts even without a new alert (a heartbeat), from the flat store
    proc = milabench("history", "--url", runs.flat_url, "--notify", url, "--notify-always")
    assert proc.returncode == 0 and len(received) == 2 and received[1][2]["alerts"] == []


def test_notify_failure_is_a_warning(runs: NightlyRuns):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://bot:pa55word@127.0.0.1:{port}/services/T000/B000/XYZSECRET?token=s3cret"
    proc = milabench("history", "--url", runs.drop_url, "--new", "10", "--notify", url)
    assert proc.returncode == 1, proc.stderr  # the exit code of the alerts, unchanged
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, proc.stderr
    assert f"notify POST to http://127.0.0.1:{port}/... failed" in warnings[0]
    for secret in ("pa55word", "bot", "XYZSECRET", "s3cret", "T000"):
        assert secret not in proc.stderr and secret not in proc.stdout


from store_schemas import V1_SCHEMA as OLD_SCHEMA  # noqa: E402  (first release)


def test_old_store_is_migrated_in_place(runs: NightlyRuns, tmp_path: Path):
    db = tmp_path / "old.sqlite"
    conn = sqlite3.connect(db)
    for stmt in OLD_SCHEMA:
        conn.execute(stmt)
    meta = json.dumps({"milabench": {"version": "0.1.0", "commit": "abc123"}})
    for i, perf in enumerate([100.0, 101.0, 99.5, 100.5, 100.2, 99.8]):
        conn.execute("INSERT INTO mb_runs VALUES (?, ?, 'h', 'oldhost', ?, ?, '/x', ?)",
                     (f"id{i}", f"old{i}", 1.7e9 + 3600 * i, 1.7e9 + 3600 * i, meta))  # fmt: skip
        conn.execute("INSERT INTO mb_results VALUES (?, 'bench', 'oldhost', ?, 1, 0, 1, ?, 1.0,"
                     " 0.5, ?, ?, 1.0, 'items/s', NULL)", (f"id{i}", 1.7e9 + 3600 * i, perf,
                                                            perf, perf))  # fmt: skip
    conn.commit()
    conn.close()
    url = f"sqlite:///{db}"
    proc = milabench("history", "--url", url, "--all", "--output", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No change point in 1 series." in proc.stdout
    assert "oldhost" in (tmp_path / "site" / "index.html").read_text()
    conn = sqlite3.connect(db)
    runs_cols = {r[1] for r in conn.execute("PRAGMA table_info(mb_runs)")}
    result_cols = {r[1] for r in conn.execute("PRAGMA table_info(mb_results)")}
    assert {"commit", "suite"} <= runs_cols
    assert {"rate", "ci_low", "ci_high", "tags"} <= result_cols
    assert conn.execute("SELECT COUNT(*) FROM mb_results").fetchone()[0] == 6
    commits = {r[0] for r in conn.execute('SELECT "commit" FROM mb_runs')}
    assert commits == {"abc123"}  # filled in from the stored meta record
    conn.close()
    with Store(url) as store:  # old rows: perf as the value, no interval, no tags
        pts = store.series("bench")
        assert [p.value for p in pts][:2] == [100.0, 101.0]
        assert all(p.ci_low is None and p.tags == [] and p.suite is None for p in pts)
        # a real run imported into the migrated store gets the new columns
        assert store.import_run(runs.night[0]).added
        (new,) = store.series("paced")
        assert new.suite == "suite.yaml" and sorted(new.tags) == ["cpu", "nightly"] and new.ci_low
    with Store(url) as store:  # opening a migrated store again changes nothing
        assert store.count("mb_results") == 7
