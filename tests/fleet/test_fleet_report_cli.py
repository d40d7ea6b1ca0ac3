"""`milabench fleet-report` as a user runs it, on fleet folders made of real run folders."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
import yaml

from ..clirun import milabench
from .report_helpers import environment, make_fleet, node, real_fleet_runs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def fleet_runs(tmp_path_factory):
    return real_fleet_runs(tmp_path_factory)


def _fleet(root, fleet_runs, *names, **kw):
    return make_fleet(root, [node(f"node{i}", fleet_runs[n]) for i, n in enumerate(names)], **kw)


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_slow_node_exit_1_identical_exit_0(tmp_path, fleet_runs):
    slow = _fleet(tmp_path / "a", fleet_runs, "normal1", "normal2", "slow")
    proc = milabench("fleet-report", str(slow))
    assert proc.returncode == 1, proc.stderr
    assert "Verdict: FLAGGED: 1 of 3 nodes (node2) (exit code 1)" in proc.stdout
    flags = proc.stdout.split("Flags\n-----\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(flags) == 2 and all(" node2 " in f and " slow: " in f for f in flags)
    assert "x the fleet median" in flags[0] and "slower" in flags[0]

    same = _fleet(tmp_path / "b", fleet_runs, "normal1", "normal1", "normal1")
    proc = milabench("fleet-report", str(same))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS: no node flagged among 3 (exit code 0)" in proc.stdout


def test_ignore_env_and_bad_options(tmp_path, fleet_runs):
    nodes = [
        node("node0", fleet_runs["normal1"]),
        node("node1", fleet_runs["normal1"]),
        node("node2", fleet_runs["normal1"], env=environment(cpu_model="Intel Xeon 8480")),
    ]
    folder = make_fleet(tmp_path, nodes)
    proc = milabench("fleet-report", str(folder))
    assert proc.returncode == 1
    assert "environment: cpu_model is Intel Xeon 8480 here, AMD EPYC 7B13 on 2 of 3" in proc.stdout
    proc = milabench("fleet-report", str(folder), "--ignore-env", "cpu_model")
    assert proc.returncode == 0, proc.stdout
    proc = milabench("fleet-report", str(folder), "--ignore-env", "cpu_modl")
    assert proc.returncode == 2
    assert "did you mean 'cpu_model'" in _one_line(proc.stderr)
    for option, value in (("--min-gap", "2"), ("--mad-k", "-1"), ("--tolerance", "abc")):
        proc = milabench("fleet-report", str(folder), option, value)
        assert proc.returncode == 2 and option in proc.stderr, (option, proc.stderr)


def test_formats_and_output(tmp_path, fleet_runs):
    folder = _fleet(tmp_path, fleet_runs, "normal1", "normal2", "slow")
    for fmt, name in (("json", "r.json"), ("markdown", "r.md"), ("html", "r.html")):
        out = tmp_path / "out" / "deep" / name
        proc = milabench("fleet-report", str(folder), "--format", fmt, "--output", str(out))
        assert proc.returncode == 1 and proc.stdout == ""
        assert f"fleet report written to {out}" in proc.stderr
        text = out.read_text(encoding="utf-8")
        if fmt == "json":
            doc = json.loads(text)
            assert doc["schema_version"] == 1 and doc["flagged_nodes"] == ["node2"]
        elif fmt == "html":
            HTMLParser().feed(text)
            assert text.startswith("<!DOCTYPE html>") and "<script" not in text
        else:
            # the rate itself is measured (about 800 items/s here, less under load)
            rows = [r for r in text.splitlines() if r.startswith("| node2 | ") and "SLOW" in r]
            assert rows and "x) SLOW" in rows[0], text


def test_baseline_round_trip(tmp_path, fleet_runs):
    good = _fleet(tmp_path / "good", fleet_runs, "normal1", "normal2", "normal1")
    path = tmp_path / "baselines" / "rack.yaml"
    proc = milabench("fleet-report", str(good), "--write-baseline", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"baseline written to {path} (1 hardware model(s), 2 benchmark rate(s))" in proc.stderr
    doc = yaml.safe_load(path.read_text())
    assert doc["schema_version"] == 1 and doc["kind"] == "milabench-fleet-baseline"
    assert doc["models"]["AMD EPYC 7B13"]["steady"]["nodes"] == 3
    # a later fleet with two nodes only (no fleet comparison): the baseline still flags
    later = _fleet(tmp_path / "later", fleet_runs, "normal2", "slow")
    proc = milabench("fleet-report", str(later), "--baseline", str(path))
    assert proc.returncode == 1
    assert "node1  steady       below-baseline: " in proc.stdout
    assert "fleet comparison not possible" in proc.stdout
    proc = milabench("fleet-report", str(later), "--baseline", str(path), "--tolerance", "0.6")
    assert proc.returncode == 0, proc.stdout
    doc["schema_version"] = 2
    path.write_text(yaml.safe_dump(doc))
    proc = milabench("fleet-report", str(later), "--baseline", str(path))
    assert proc.returncode == 2
    assert "schema version 2 is newer than this milabench reads" in _one_line(proc.stderr)


def test_newer_and_corrupt_fleet_json(tmp_path):
    folder = tmp_path / "fleet.x"
    folder.mkdir()
    (folder / "fleet.json").write_text(json.dumps({"schema_version": 9, "nodes": []}))
    proc = milabench("fleet-report", str(folder))
    assert proc.returncode == 2
    assert "schema version 9 is newer than this milabench reads (1)" in _one_line(proc.stderr)
    (folder / "fleet.json").write_bytes(b'{"schema_version": 1, "nodes": [{"na\x00')
    proc = milabench("fleet-report", str(folder))
    assert proc.returncode == 2
    line = _one_line(proc.stderr)
    assert "fleet.json" in line and "not valid JSON" in line


def test_unreachable_and_corrupt_node(tmp_path, fleet_runs):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "steady.D0.data").write_text("garbage\n")
    (corrupt / "steady-jobs.0.data").mkdir()  # a folder where a file should be
    nodes = [
        node("node0", fleet_runs["normal1"]),
        node("node1", fleet_runs["normal2"]),
        node("node2", fleet_runs["normal1"]),
        node("gone", None, status="unreachable", reason="connect timed out after 10 s"),
        node("bad", corrupt),
    ]
    proc = milabench("fleet-report", str(make_fleet(tmp_path / "f", nodes)))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    flags = [" ".join(line.split()) for line in proc.stdout.splitlines()]
    assert "gone - failed: unreachable: connect timed out after 10 s" in flags
    assert (
        "bad - failed: run folder nodes/bad cannot be read: Is a directory (steady-jobs.0.data)"
        in flags
    )


def test_latest_fleet_under_base(tmp_path, fleet_runs):
    base = tmp_path / "base"
    older = _fleet(base / "fleet", fleet_runs, "normal1", "normal1", "normal1",
                   name="fleet.2026-01-01_00-00-00", started="2026-01-01T00:00:00+00:00")  # fmt: skip
    newer = _fleet(base / "fleet", fleet_runs, "normal1", "normal2", "slow",
                   name="fleet.2026-02-01_00-00-00", started="2026-02-01T00:00:00+00:00")  # fmt: skip
    proc = milabench("fleet-report", "--base", str(base))
    assert proc.returncode == 1
    assert f"fleet report of {newer} (latest fleet run under {base / 'fleet'}" in proc.stderr
    assert older.name in proc.stderr  # named among the others
    proc = milabench("fleet-report", env={"MILABENCH_BASE": str(base)})
    assert proc.returncode == 1 and str(newer) in proc.stderr
    proc = milabench("fleet-report", str(base / "fleet"), "--format", "json")
    assert json.loads(proc.stdout)["fleet"]["name"] == newer.name
    proc = milabench("fleet-report", "--base", str(tmp_path / "empty"))
    assert proc.returncode == 2
    assert "no fleet run under" in _one_line(proc.stderr)


def test_listed_in_help():
    proc = milabench("--help")
    assert proc.returncode == 0 and "fleet-report" in proc.stdout
    proc = milabench("fleet-report", "--help")
    assert proc.returncode == 0
    for option in ("--mad-k", "--min-gap", "--tolerance", "--baseline", "--write-baseline",
                   "--ignore-env", "--format", "--output"):  # fmt: skip
        assert option in proc.stdout
