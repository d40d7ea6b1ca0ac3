"""The fleet report (milabench/fleet/report.py): rules as pure functions, then whole fleet
folders assembled from real `milabench run` folders (tests/fleet/report_helpers.py)."""

from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser

import pytest
from headless import external_urls, open_page

from milabench.errors import UsageError
from milabench.fleet.report import (
    BELOW_BASELINE,
    ENVIRONMENT,
    FAILED,
    SLOW,
    FleetNode,
    FleetThresholds,
    build_fleet_report,
    check_below_baseline,
    check_slow,
    compare_environments,
    load_baseline,
    load_fleet,
    median_abs_deviation,
    render_fleet,
    slow_threshold,
    spread_without,
    write_baseline,
)

from ..report import synth
from .report_helpers import environment, make_fleet, node, real_fleet_runs


@pytest.fixture(scope="session")
def fleet_runs(tmp_path_factory):
    return real_fleet_runs(tmp_path_factory)


# -- the slow rule at its edges (pure functions) -----------------------------------------


def test_median_absolute_deviation():
    assert median_abs_deviation([100.0]) == 0.0
    assert median_abs_deviation([100.0, 100.0, 50.0]) == 0.0  # one outlier cannot widen it
    assert median_abs_deviation([1.0, 2.0, 3.0, 4.0, 100.0]) == 1.0


def test_threshold_is_the_larger_term():
    # min-gap term: 10% of 100 = 10; MAD term: 3 x 1.4826 x 1 = 4.4478
    assert slow_threshold(100.0, 1.0, mad_k=3, min_gap=0.10) == pytest.approx(10.0)
    # MAD term: 3 x 1.4826 x 5 = 22.239 > 10
    assert slow_threshold(100.0, 5.0, mad_k=3, min_gap=0.10) == pytest.approx(22.239)
    assert slow_threshold(100.0, 0.0, mad_k=3, min_gap=0.0) == 0.0


def test_min_gap_edge():
    """Exactly at the minimum gap is not slow; just beyond is."""
    at = check_slow(90.0, 90.5, 100.0, 0.0, mad_k=3, min_gap=0.10)
    assert at.threshold == pytest.approx(10.0) and at.gap == pytest.approx(10.0)
    assert not at.beyond and not at.slow
    beyond = check_slow(89.9, 90.4, 100.0, 0.0, mad_k=3, min_gap=0.10)
    assert beyond.beyond and beyond.slow and not beyond.by_mad


def test_mad_edge():
    """With a spread fleet the MAD term sets the threshold: a gap inside it passes."""
    mad = 4.0  # 3 x 1.4826 x 4 = 17.7912
    inside = check_slow(100.0 - 17.7, 83.0, 100.0, mad, mad_k=3, min_gap=0.10)
    assert inside.by_mad and not inside.slow
    outside = check_slow(100.0 - 17.9, 82.5, 100.0, mad, mad_k=3, min_gap=0.10)
    assert outside.by_mad and outside.slow
    # a smaller k narrows the MAD term: the same value is then beyond it
    assert check_slow(100.0 - 17.7, 83.0, 100.0, mad, mad_k=2, min_gap=0.10).slow


def test_own_interval_reaching_the_median_is_not_slow():
    """A noisy node whose 95% interval reaches the median is not flagged."""
    assert check_slow(50.0, 99.9, 100.0, 0.0).slow
    reaches = check_slow(50.0, 100.0, 100.0, 0.0)
    assert reaches.beyond and reaches.ci_reaches and not reaches.slow
    unknown = check_slow(50.0, None, 100.0, 0.0)  # one observation: the gap decides
    assert unknown.slow and not unknown.ci_known


def test_faster_than_median_never_slow():
    assert not check_slow(200.0, 210.0, 100.0, 0.0).slow


def test_below_baseline_edges():
    assert not check_below_baseline(90.0, 91.0, 100.0, 0.10)  # exactly at the tolerance
    assert check_below_baseline(89.0, 91.0, 100.0, 0.10)
    assert not check_below_baseline(89.0, 100.0, 100.0, 0.10)  # interval reaches it
    assert check_below_baseline(89.0, None, 100.0, 0.10)


def test_thresholds_are_checked():
    with pytest.raises(UsageError, match="--min-gap"):
        FleetThresholds(min_gap=1.5)
    with pytest.raises(UsageError, match="--mad-k"):
        FleetThresholds(mad_k=-1)
    with pytest.raises(UsageError, match="--tolerance"):
        FleetThresholds(tolerance=math.nan)
    with pytest.raises(UsageError, match="did you mean 'cpu_model'"):
        FleetThresholds(ignore_env=("cpu_modle",))
    th = FleetThresholds(ignore_env=("torch", "packages[main]"))
    assert th.ignores("torch[other]") and th.ignores("packages[main]")
    assert not th.ignores("packages[other]") and not th.ignores("python")


def _node(name: str, **env) -> FleetNode:
    return FleetNode(name, None, "ok", None, {}, None, environment(**env))


def test_environment_majority_tie_and_missing_group():
    nodes = [
        _node("a"),
        _node("b"),
        _node("c", python="3.12.1", torch={}),
    ]
    rows = {r.key: r for r in compare_environments(nodes, FleetThresholds())}
    assert rows["python"].majority == "3.11.7" and rows["python"].differing == ["c"]
    # an install group a node lacks counts as None there
    assert rows["torch[sleepy]"].values["c"] is None
    assert rows["torch[sleepy]"].differing == ["c"]
    assert rows["cpu_model"].differing == []
    tie = {r.key: r for r in compare_environments(nodes[1:], FleetThresholds())}["python"]
    assert tie.tie and sorted(tie.differing) == ["b", "c"]


# -- fleets made of real run folders -----------------------------------------------------


def _fleet(tmp_path, fleet_runs, *names, **kw):
    """A fleet whose node<i> is a copy of the run `names[i]`."""
    return make_fleet(
        tmp_path, [node(f"node{i}", fleet_runs[n]) for i, n in enumerate(names)], **kw
    )


def test_slow_node_flagged_with_reason(tmp_path, fleet_runs):
    folder = _fleet(tmp_path, fleet_runs, "normal1", "normal2", "slow")
    report = build_fleet_report(load_fleet(folder))
    assert report.flagged_nodes == ["node2"]
    assert report.exit_code == 1
    assert {f.kind for f in report.flagged} == {SLOW}
    benches = {f.benchmark for f in report.flagged}
    assert benches == {"steady", "steady-jobs"}
    for flag in report.flagged:
        row = report.row(flag.benchmark)
        # half the normal rate; the normal runs may differ a little on a busy machine
        assert 0.35 < row.relative["node2"] < 0.75
        assert "x the fleet median" in flag.reason and "slower" in flag.reason
        assert "allowed gap is 10%" in flag.reason and "not measurement noise" in flag.reason
    # the normal nodes are not flagged whatever their small differences
    assert not report.flags_of("node0", "steady") and not report.flags_of("node1", "steady")


def test_identical_fleet_passes(tmp_path, fleet_runs):
    folder = _fleet(tmp_path, fleet_runs, "normal1", "normal1", "normal1")
    report = build_fleet_report(load_fleet(folder))
    assert report.flagged == [] and report.exit_code == 0
    row = report.row("steady")
    assert row.compared and row.mad == 0.0
    assert all(v == pytest.approx(1.0) for v in row.relative.values())
    assert report.summary is not None and report.summary.compared


def test_cells_are_what_the_run_report_says(tmp_path, fleet_runs):
    """A node's rate, interval, units and status come from the ordinary report."""
    from milabench.report import build_report
    from milabench.report.render_tables import breakdown_rows

    folder = _fleet(tmp_path, fleet_runs, "normal1", "broken", "slow")
    data = load_fleet(folder)
    for fleet_node in data.nodes:
        expected = {r["name"]: r for r in breakdown_rows(build_report([fleet_node.run_dir]))}
        assert set(expected) == set(fleet_node.cells)
        for name, cell in fleet_node.cells.items():
            row = expected[name]
            assert (cell.rate, cell.ci_low, cell.ci_high, cell.units) == (
                row["rate"],
                row["ci95_low"],
                row["ci95_high"],
                row["units"],
            )
            assert (cell.status == "ok") == (row["fail"] == 0 and row["rate"] is not None)


def test_failed_and_missing_benchmarks(tmp_path, fleet_runs):
    folder = _fleet(tmp_path, fleet_runs, "normal1", "normal2", "broken")
    report = build_fleet_report(load_fleet(folder))
    assert report.flagged_nodes == ["node2"]
    by_bench = {f.benchmark: f for f in report.flags_of("node2", "broken")}
    broken = by_bench["broken"]
    assert broken.kind == FAILED
    # the cause comes from the run files (the traceback's last line)
    assert "RuntimeError: planted failure for the report tests" in broken.reason
    assert "exit code 1" in broken.reason
    (missing,) = report.flags_of("node2", "steady-jobs")
    assert missing.kind == FAILED
    assert "no result" in missing.reason and "2 other node(s) measured it" in missing.reason


def test_environment_differs_and_ignore(tmp_path, fleet_runs):
    nodes = [
        node("node0", fleet_runs["normal1"]),
        node("node1", fleet_runs["normal1"], env=environment(torch={"sleepy": "2.12.0"})),
        node("node2", fleet_runs["normal1"], env=environment(cpu_model="Intel Xeon 8480")),
    ]
    data = load_fleet(make_fleet(tmp_path, nodes))
    report = build_fleet_report(data)
    env_flags = [f for f in report.flagged if f.kind == ENVIRONMENT]
    assert [(f.node, f.key) for f in env_flags] == [
        ("node1", "torch[sleepy]"),
        ("node2", "cpu_model"),
    ]
    assert "torch[sleepy] is 2.12.0 here, 2.13.0+cpu on 2 of 3 nodes" in env_flags[0].reason
    assert "--ignore-env cpu_model" in env_flags[1].reason
    quiet = build_fleet_report(data, FleetThresholds(ignore_env=("torch", "cpu_model")))
    assert quiet.flagged == [] and quiet.exit_code == 0


def test_unreachable_missing_and_corrupt_nodes(tmp_path, fleet_runs):
    corrupt = tmp_path / "corrupt-run"
    corrupt.mkdir()
    (corrupt / "steady.D0.data").write_bytes(b'\x00\xff not json at all\n{"event": \n')
    nodes = [
        node("node0", fleet_runs["normal1"]),
        node("node1", fleet_runs["normal1"]),
        node("node2", fleet_runs["normal1"]),
        node("node3", None, status="unreachable", reason="connect timed out after 10 s"),
        node("node4", None, run="nodes/node4"),  # says ok, but no folder was copied
        node("node5", corrupt),
        node("node6", None, run="../../etc"),
    ]
    nodes[3]["environment"] = None
    report = build_fleet_report(load_fleet(make_fleet(tmp_path / "f", nodes)))
    assert report.flagged_nodes == ["node3", "node4", "node5", "node6"]
    (unreachable,) = report.flags_of("node3")
    assert unreachable.kind == FAILED
    assert unreachable.reason == "unreachable: connect timed out after 10 s"
    assert "missing from the fleet folder" in report.flags_of("node4")[0].reason
    corrupt_flags = report.flagged[[f.node for f in report.flagged].index("node5")]
    assert corrupt_flags.kind == FAILED and "incomplete" in corrupt_flags.reason
    assert "outside the fleet folder" in report.flags_of("node6")[0].reason
    for fmt in ("text", "markdown", "json", "html"):
        assert "node3" in render_fleet(report, fmt)


def test_few_nodes_no_comparison_but_baseline_applies(tmp_path, fleet_runs):
    full = build_fleet_report(
        load_fleet(_fleet(tmp_path / "a", fleet_runs, "normal1", "normal2", "normal1"))
    )
    baseline = write_baseline(full, tmp_path / "baseline.json")
    two = load_fleet(_fleet(tmp_path / "b", fleet_runs, "normal1", "slow"))
    report = build_fleet_report(two)
    assert report.flagged == []
    assert any("fleet comparison not possible" in n and "steady" in n for n in report.notes)
    with_baseline = build_fleet_report(two, baseline=load_baseline(baseline.path))
    assert {(f.node, f.kind) for f in with_baseline.flagged} == {("node1", BELOW_BASELINE)}


def test_baseline_round_trip(tmp_path, fleet_runs):
    report = build_fleet_report(
        load_fleet(_fleet(tmp_path / "a", fleet_runs, "normal1", "normal2", "slow"))
    )
    for name in ("base.yaml", "sub/base.json"):
        written = write_baseline(report, tmp_path / name)
        loaded = load_baseline(tmp_path / name)
        model = "AMD EPYC 7B13"
        assert set(loaded.models) == {model}
        steady = loaded.models[model]["steady"]
        # the slow node is left out: the baseline is the median of the two normal nodes
        rates = [report.row("steady").cells[n].rate for n in ("node0", "node1")]
        assert steady.rate == pytest.approx(sum(rates) / 2)
        assert steady.nodes == 2 and steady.units == "items/s"
        assert loaded.models == written.models
        assert loaded.source == report.data.name
    again = build_fleet_report(report.data, baseline=load_baseline(tmp_path / "base.yaml"))
    below = [f for f in again.flagged if f.kind == BELOW_BASELINE]
    assert {(f.node, f.benchmark) for f in below} == {
        ("node2", "steady"),
        ("node2", "steady-jobs"),
    }
    assert "x the baseline" in below[0].reason and "AMD EPYC 7B13" in below[0].reason


@pytest.mark.parametrize(
    "text, message",
    [
        ("schema_version: 7\nmodels: {}\n", "schema version 7 is newer"),
        ("schema_version: 1\nmodels: {m: {steady: {rate: -3}}}\n", "models.m.steady.rate"),
        ("schema_version: 1\nmodels: [1]\n", "models:"),
        ("{not: [valid\n", "not valid YAML or JSON"),
    ],
)
def test_bad_baseline_is_one_line(tmp_path, text, message):
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message.replace("[", r"\[")) as info:
        load_baseline(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_spread_of_the_others():
    """The judged node's own value never widens the spread it is held to."""
    rates = {"node0": 0.0350, "node1": 0.0411, "node2": 0.0129}
    assert spread_without(rates, "node2") == (pytest.approx(0.00305), 2)
    assert spread_without(rates, "node0") == (pytest.approx(0.0141), 2)
    # with every node in it, the spread is the healthy pair's whole difference
    assert median_abs_deviation(list(rates.values())) == pytest.approx(0.0061)


def test_three_node_fleet_with_noisy_healthy_nodes(tmp_path):
    """The fleet CI once printed PASS for this: two healthy nodes 17% apart (a loaded
    2-core machine) and a throttled one at 0.37x. With the MAD of all three, the allowed
    gap was 77% and the slow node passed; held to the others' spread it is flagged, and
    the healthy ones are not."""
    values = {"node0": 0.0350, "node1": 0.0411, "node2": 0.0129}
    nodes = []
    for name, rate in values.items():
        run = tmp_path / "runs" / name
        synth.write_file(run, "flops-fp32.D0", synth.entry("flops-fp32"), rates=[rate] * 12)
        nodes.append(node(name, run))
    report = build_fleet_report(load_fleet(make_fleet(tmp_path, nodes)))
    assert report.flagged_nodes == ["node2"], [f.reason for f in report.flagged]
    (flag,) = report.flagged
    assert "MAD of the other 2 nodes" in flag.reason
    row = report.row("flops-fp32")
    gaps = row.allowed_gaps
    assert gaps is not None and gaps[0] == pytest.approx(3 * 1.4826 * 0.00305 / 0.035)
    text = render_fleet(report, "text")
    assert "allowed gap" in text and "MAD of the other nodes" in text
    doc = json.loads(render_fleet(report, "json"))
    (bench,) = doc["benchmarks"]
    assert bench["allowed_gap"]["min"] == pytest.approx(gaps[0])
    assert bench["cells"]["node2"]["slow_check"]["others"] == 2
    assert bench["cells"]["node2"]["slow_check"]["mad_of_others"] == pytest.approx(0.00305)


def test_broad_slowdown_flagged_by_the_summary(tmp_path):
    """No benchmark alone is beyond its (wide, MAD-set) threshold, but node4 is 14% slow
    on both: the geometric mean over benchmarks flags it, once, for the node."""
    rates = {
        "alpha": [100.0, 112.0, 88.0, 100.0, 86.0],
        "beta": [100.0, 88.0, 112.0, 100.0, 86.0],
    }
    nodes = []
    for i in range(5):
        run = tmp_path / "runs" / f"n{i}"
        for bench, values in rates.items():
            synth.write_file(run, f"{bench}.D0", synth.entry(bench), rates=[values[i]] * 12)
        nodes.append(node(f"node{i}", run))
    report = build_fleet_report(load_fleet(make_fleet(tmp_path, nodes)))
    assert not any(f.benchmark for f in report.flagged)
    (flag,) = report.flagged
    assert (flag.node, flag.benchmark, flag.kind) == ("node4", None, SLOW)
    assert "0.86x the fleet" in flag.reason and "2 compared benchmarks" in flag.reason


def test_running_fleet_is_partial_not_failed(tmp_path, fleet_runs):
    nodes = [
        node("node0", fleet_runs["normal1"]),
        node("node1", fleet_runs["normal1"]),
        node("node2", fleet_runs["normal1"]),
        node("node3", None, status=None, phase="run"),
    ]
    report = build_fleet_report(load_fleet(make_fleet(tmp_path, nodes, ended=None)))
    assert report.flagged == []
    assert any("node3: not finished yet (phase: run)" in n for n in report.notes)
    ended = build_fleet_report(load_fleet(make_fleet(tmp_path / "e", nodes)))
    assert ended.flagged_nodes == ["node3"]


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.open: list[str] = []
        self.classes: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.classes += [c for k, v in attrs if k == "class" and v for c in v.split()]
        if tag in ("table", "ul", "li", "tr", "td", "th", "svg", "h1", "h2", "p"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in ("table", "ul", "li", "tr", "td", "th", "svg", "h1", "h2", "p"):
            assert self.open and self.open[-1] == tag, (self.open, tag)
            self.open.pop()


def test_every_format_renders(tmp_path, fleet_runs):
    folder = _fleet(tmp_path, fleet_runs, "normal1", "normal2", "slow")
    report = build_fleet_report(load_fleet(folder))
    text = render_fleet(report, "text")
    assert "FLAGGED: 1 of 3 nodes (node2) (exit code 1)" in text
    assert "(0.5" in text and "SLOW" in text and "items/s" in text
    md = render_fleet(report, "markdown")
    assert md.startswith("## ❌") and "| steady (items/s) |" in md and "`slow`" in md
    doc = json.loads(render_fleet(report, "json"))
    assert doc["schema_version"] == 1 and doc["kind"] == "milabench-fleet-report"
    assert doc["exit_code"] == 1 and doc["flagged_nodes"] == ["node2"]
    steady = next(b for b in doc["benchmarks"] if b["name"] == "steady")
    assert steady["cells"]["node2"]["slow_check"]["slow"] is True
    assert steady["cells"]["node0"]["ci95_low"] <= steady["cells"]["node0"]["rate"]
    html = render_fleet(report, "html")
    parser = _Collect()
    parser.feed(html)
    parser.close()
    assert parser.open == []
    assert "script" not in parser.tags and "link" not in parser.tags
    assert "slow" in parser.classes and "plot-fleet" in parser.classes  # a flagged cell, a plot
    assert "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    with pytest.raises(UsageError, match="unknown fleet report format"):
        render_fleet(report, "csv")


@pytest.mark.slow
def test_html_page_in_chromium(tmp_path, fleet_runs, chromium):
    """The fleet page drawn by headless Chromium: no console error, offline, the flagged
    node's row and cells, the unreachable node, the baseline table and one plot per
    benchmark."""
    full = build_fleet_report(
        load_fleet(_fleet(tmp_path / "a", fleet_runs, "normal1", "normal2", "normal1"))
    )
    baseline = write_baseline(full, tmp_path / "baseline.json")
    nodes = [node(f"node{i}", fleet_runs[n]) for i, n in enumerate(("normal1", "normal2", "slow"))]
    nodes.append(node("node3", None, status="unreachable", reason="connect timed out"))
    folder = make_fleet(tmp_path / "f", nodes)
    report = build_fleet_report(load_fleet(folder), baseline=baseline)
    page = tmp_path / "fleet.html"
    page.write_text(render_fleet(report, "html"), encoding="utf-8")
    assert external_urls(page.read_text()) == []
    dom, console = open_page(chromium, page, tmp_path / "profile")
    assert console == [], console
    assert "FLAGGED: 2 of 4 nodes (node2, node3)" in dom
    nodes_table = dom[dom.index('<table class="nodes">') :]
    for name in ("node0", "node1", "node2", "node3"):
        assert f"<td>{name}</td>" in nodes_table.split("</table>")[0]
    rates = dom[dom.index('<table class="rates">') :].split("</table>")[0]
    assert rates.count("<tr>") == 1 + 4 + 4  # header, the fleet's rows, one per node
    assert re.search(r'<td class="num slow"[^>]*>[^<]*SLOW[^<]*</td>', rates)
    assert '<li class="flag failed"><b>node3</b>' in dom
    assert '<table class="baseline">' in dom
    assert dom.count('class="plot plot-fleet"') == len(report.benchmarks)
    assert dom.count('class="bar"') >= 3 * len(report.benchmarks)


def test_newer_or_corrupt_fleet_json(tmp_path):
    folder = tmp_path / "fleet.x"
    folder.mkdir()
    (folder / "fleet.json").write_text(json.dumps({"schema_version": 2, "nodes": []}))
    with pytest.raises(UsageError, match="schema version 2 is newer than this milabench reads"):
        load_fleet(folder)
    (folder / "fleet.json").write_text('{"schema_version": 1, "nodes": [')
    with pytest.raises(UsageError, match="not valid JSON"):
        load_fleet(folder)
    (folder / "fleet.json").write_text(json.dumps({"schema_version": 1, "nodes": [{"x": 1}]}))
    with pytest.raises(UsageError, match=r"nodes\[0\]\.name"):
        load_fleet(folder)
    with pytest.raises(UsageError, match="not a fleet folder"):
        load_fleet(tmp_path)
    (folder / "fleet.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(UsageError, match=r"fleet\.json: not UTF-8 text"):
        load_fleet(folder)
    (folder / "fleet.json").unlink()
    (folder / "fleet.json").mkdir()  # a folder where the file should be: it cannot be read
    with pytest.raises(UsageError, match="not a fleet folder"):
        load_fleet(folder)
    baseline = tmp_path / "base.yaml"
    baseline.write_bytes(b"\xff\xfe")
    with pytest.raises(UsageError, match=r"^--baseline .*base\.yaml: not UTF-8 text"):
        load_baseline(baseline)
    with pytest.raises(UsageError, match=r"^--baseline .*nowhere\.yaml: cannot read"):
        load_baseline(tmp_path / "nowhere.yaml")


def test_unknown_keys_are_ignored(tmp_path, fleet_runs):
    nodes = [node(f"node{i}", fleet_runs["normal1"], future_key={"a": 1}) for i in range(3)]
    folder = make_fleet(tmp_path, nodes, new_top_level_key=[1, 2])
    assert build_fleet_report(load_fleet(folder)).exit_code == 0
