"""The fleet report and `milabench doctor`: the cause next to a slow node (what its run
recorded during the window, what the doctor found on it), the findings compared across
nodes, and a node measured despite a failure flagged. Fleet folders are assembled from
real `milabench run` folders (tests/fleet/report_helpers.py)."""

from __future__ import annotations

import json
import re

import pytest

from milabench.doctor.findings import Finding
from milabench.doctor.record import DOCTOR_FILE, write_doctor_file
from milabench.fleet.report import (
    DOCTOR,
    SLOW,
    build_fleet_report,
    load_fleet,
    render_fleet,
)

from .report_helpers import make_fleet, node, real_fleet_runs


@pytest.fixture(scope="session")
def fleet_runs(tmp_path_factory):
    return real_fleet_runs(tmp_path_factory)


def finding(check, subject, severity, reason):
    return Finding(check, subject, severity, reason).as_dict()


HEALTHY = [
    finding("pcie_link", "gpu0", "ok", "PCIe gen 5 x16"),
    finding("power_limit", "gpu0", "ok", "power limit 700 W (default 700 W)"),
]


def plant_interference(folder, name: str, others: float) -> None:
    """Add to every `steady` file of a node's run folder one `interference` record in the
    middle of its measured window, as the runner writes them."""
    for path in (folder / "nodes" / name).glob("steady*.data"):
        times = [
            e["data"]["time"]
            for e in map(json.loads, path.read_text().splitlines())
            if e.get("event") == "data" and "rate" in (e.get("data") or {})
        ]
        record = {
            "task": "main",
            "time": (times[0] + times[-1]) / 2,
            "interference": {"seconds": 1.0, "cpus": 2, "busy": 2.0, "bench": 0.9,
                             "self": 0.0, "others": others, "steal": 0.0,
                             "top": [["mb-cpu-hog", 1, 1.0]]},
        }  # fmt: skip
        with path.open("a") as f:
            f.write(json.dumps({"event": "data", "data": record, "pipe": "data"}) + "\n")


def test_slow_node_carries_its_cause_and_doctor_findings_side_by_side(tmp_path, fleet_runs):
    slow_doctor = [
        finding("pcie_link", "gpu0", "warn", "PCIe gen 5 x8, the GPU and slot allow x16: slower"),
        HEALTHY[1],
    ]
    nodes = [
        node("node0", fleet_runs["normal1"], doctor=HEALTHY),
        node("node1", fleet_runs["normal2"], doctor=HEALTHY),
        node("node2", fleet_runs["slow"], doctor=slow_doctor),
    ]
    folder = make_fleet(tmp_path, nodes)
    for n in ("node0", "node1", "node2"):  # fleet.json's findings are the ones compared
        (folder / "nodes" / n / DOCTOR_FILE).unlink(missing_ok=True)
    plant_interference(folder, "node2", others=1.0)
    report = build_fleet_report(load_fleet(folder))
    slow = [f for f in report.flagged if f.kind == SLOW and f.benchmark == "steady"]
    assert [f.node for f in slow] == ["node2"]
    reason = slow[0].reason
    assert re.search(r"seen during its window: other processes used \d+% of the \d+ CPUs", reason)
    assert "mb-cpu-hog" in reason
    assert "milabench doctor on this node: gpu0 pcie_link: PCIe gen 5 x8" in reason
    rows = {(r.check, r.subject): r for r in report.doctor}
    assert list(rows) == [("pcie_link", "gpu0")]
    row = rows[("pcie_link", "gpu0")]
    assert row.problems == ["node2"]
    assert {n: f.severity for n, f in row.findings.items()} == {
        "node0": "ok", "node1": "ok", "node2": "warn"
    }  # fmt: skip
    text = render_fleet(report, "text")
    assert "Doctor (milabench doctor on each node)" in text
    assert "node2: warn gpu0 pcie_link: PCIe gen 5 x8" in text
    md = render_fleet(report, "markdown")
    assert "### Doctor" in md and "| pcie_link | gpu0 | ok | ok | warn |" in md
    data = json.loads(render_fleet(report, "json"))
    assert data["doctor"][0]["problems"] == ["node2"]
    assert data["nodes"][2]["doctor"][0]["severity"] == "warn"
    assert "<h2>Doctor</h2>" in render_fleet(report, "html")


def test_a_node_measured_despite_a_doctor_failure_is_flagged(tmp_path, fleet_runs):
    capped = [finding("power_limit", "gpu0", "fail", "power limit 490 W is 70% of 700 W")]
    nodes = [
        node("node0", fleet_runs["normal1"], doctor=HEALTHY),
        node("node1", fleet_runs["normal2"], doctor=HEALTHY),
        node("node2", fleet_runs["normal1"], doctor=capped),
    ]
    folder = make_fleet(tmp_path, nodes)
    for n in ("node0", "node1", "node2"):
        (folder / "nodes" / n / DOCTOR_FILE).unlink(missing_ok=True)
    report = build_fleet_report(load_fleet(folder))
    flags = [f for f in report.flagged if f.kind == DOCTOR]
    assert [(f.node, f.benchmark) for f in flags] == [("node2", None)]
    assert "measured despite doctor failures: gpu0 power_limit" in flags[0].reason
    assert report.exit_code == 1


def test_the_run_folders_findings_win_over_fleet_json(tmp_path, fleet_runs):
    nodes = [node(f"node{i}", fleet_runs["normal1"], doctor=HEALTHY) for i in range(3)]
    folder = make_fleet(tmp_path, nodes)
    write_doctor_file(
        str(folder / "nodes" / "node1"),
        [Finding("steal", "host", "warn", "steal 9% of the CPU time over 0.5 s")],
    )
    fleet = load_fleet(folder)
    assert [f.check for f in fleet.node("node1").doctor] == ["steal"]
    report = build_fleet_report(fleet)
    assert [r.check for r in report.doctor if "node1" in r.problems] == ["steal"]
