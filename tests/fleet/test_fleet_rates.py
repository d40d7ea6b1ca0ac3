"""`milabench fleet` compares the rates of real loopback sshd nodes
(tests/fleet/conftest.py): three nodes of the CPU suite's ``flops-fp32``, one throttled
by its cgroup's CPU quota, are flagged exactly; the same three with equal quotas pass.
The equal nodes come first: they install the nodes' environments at the healthy quota,
which the throttled node then finds up to date (installing at a fifth of a CPU took
half a minute). Both tests compare rates measured at the same time on this machine, so
they are quiet (tests/concurrency.py: the nodes' cgroups are made under the worker's
group, in the foreground), and their premise, nodes of equal quota measuring equal, is
checked: a window the machine disturbed is measured once more
(`fleetcluster.run_fleet_measured`); the fleet's other behaviours (lost, unreachable and silent
nodes, signals, folders) are in test_fleet_nodes.py, whose nodes take the background.
"""

from __future__ import annotations

import json

import pytest
from fleetcluster import (
    FLEET_TIMEOUT,
    HEALTHY_QUOTA_US,
    MIN_GAP,
    THROTTLE_QUOTA_US,
    assert_nothing_left,
    by_name,
    fleet_argv,
    fleet_report,
    node_sees,
    read_fleet,
    run_files,
    run_fleet_measured,
)
from systemtools import cannot_run_here

pytestmark = [pytest.mark.ssh, pytest.mark.slow, pytest.mark.timeout(FLEET_TIMEOUT + 300)]


# The rate comparisons need rates, not the suite's +-2% ones: a shorter window. The
# throttled node is 2.5x slower and healthy ones 2% apart, so +-10% decides both verdicts
# (the slow rule also wants the node's interval below the median): known in seconds.
SHORT = (
    *("--override", "flops-fp32.measure.warmup_max=3s"),
    *("--override", "flops-fp32.measure.min=2s"),
    *("--override", "flops-fp32.measure.max=8s"),
    *("--override", "flops-fp32.measure.precision=0.1"),
)


def test_fleet_without_throttle_passes(fleet_cluster, tmp_path):
    """(ii)+(iv) The same three nodes, node2 given the healthy quota: nothing flagged,
    exit 0. The nodes
    have their own base folders; node1 has no rsync (SFTP both ways) and cannot see the
    main node's folders, so it ran what the fleet copied to it."""
    c = fleet_cluster
    if c.node2.cgroup is not None:
        c.node2.cgroup.set_quota(HEALTHY_QUOTA_US)
    try:
        system = c.system_file(
            tmp_path / "system.yaml",
            [c.entry(c.node0), c.entry(c.node1), c.entry(c.node2)],
            cpus=1,
        )
        done, folder = run_fleet_measured(
            c,
            lambda base: fleet_argv(c, system, base, "--min-gap", MIN_GAP, *SHORT),
            c.main / "healthy",
            equal=("node0", "node1", "node2"),
        )
    finally:
        if c.node2.cgroup is not None:
            c.node2.cgroup.set_quota(THROTTLE_QUOTA_US)
    doc = read_fleet(folder)
    report = fleet_report(folder)
    assert done.returncode == 0, (done.stdout + done.stderr, [f.reason for f in report.flagged])
    assert report.flagged == []
    assert all(b.compared for b in report.benchmarks)  # three rates: really compared
    nodes = by_name(doc)
    assert all(n["status"] == "ok" and n["reason"] is None for n in nodes.values()), doc
    # (iv) where things ran and how they moved
    assert nodes["node0"]["code"] == "rsync" and nodes["node2"]["code"] == "rsync"
    assert nodes["node1"]["code"] == "sftp"
    assert nodes["node1"]["collected_by"] == "sftp"
    assert nodes["node0"]["collected_by"] == "rsync"
    for name, node in nodes.items():
        own = c.bases / name / "nodes" / name
        assert node["base"] == str(own)
        on_node = own / "runs" / doc["name"]
        assert (on_node / "report.json").is_file(), on_node
        assert run_files(on_node) == run_files(folder / "nodes" / name)
        env = node["environment"]
        assert env["python"] and env["cpu_count"] and env["torch"]["torch"]
        assert env["packages"]["torch"] == nodes["node0"]["environment"]["packages"]["torch"]
        assert env["milabench_commit"] == nodes["node0"]["environment"]["milabench_commit"]
        pushed = c.bases / name / "code" / doc["name"] / "pkg" / "milabench"
        assert pushed.is_dir(), pushed  # the tool the node ran is its own copy...
        stamp = json.loads((pushed.parent / ".milabench-code.json").read_text())
        assert stamp["source"] == str(c.tool)  # ...of the frozen tool the test started
    if c.hidden:  # node1 really could not have used the main node's copy of anything
        for path in (c.tool / "milabench", c.suite, folder):
            assert not node_sees(c, c.node1, path), path
        assert node_sees(c, c.node1, c.bases / "node1" / "code" / doc["name"] / "pkg")
    assert_nothing_left(c, c.node0, c.node1, c.node2)


def test_fleet_flags_exactly_the_throttled_node(fleet_cluster, tmp_path):
    """(i) One command, three nodes, one throttled by its cgroup: flagged alone, exit 1."""
    c = fleet_cluster
    if c.throttle_problem:
        cannot_run_here(f"no CPU quota: {c.throttle_problem}")
    system = c.system_file(
        tmp_path / "system.yaml",
        [c.entry(c.node0), c.entry(c.node1), c.entry(c.node2)],
        cpus=1,
    )
    throttled_before = c.node2.cgroup.throttled_periods()
    done, folder = run_fleet_measured(
        c,
        lambda base: fleet_argv(c, system, base, "--min-gap", MIN_GAP, *SHORT),
        c.main / "throttled",
        equal=("node0", "node1"),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    doc = read_fleet(folder)
    nodes = by_name(doc)
    assert {n: v["status"] for n, v in nodes.items()} == {
        "node0": "ok",
        "node1": "ok",
        "node2": "ok",
    }, doc
    assert doc["ended"] is not None
    for name in nodes:
        files = run_files(folder / "nodes" / name)
        assert {"flops-fp32.D0.data", "report.json", "report.md"} <= files, (name, files)
    report = fleet_report(folder)
    assert report.flagged_nodes == ["node2"], [f.reason for f in report.flagged]
    assert {f.kind for f in report.flagged} == {"slow"}, report.flagged
    assert c.node2.cgroup.throttled_periods() > throttled_before  # the quota really bit
    runs = [n["timeline"]["run"] for n in nodes.values()]
    assert max(b for b, _ in runs) < min(e for _, e in runs)  # the three runs overlapped
    (flag,) = report.flagged
    assert flag.benchmark == "flops-fp32" and "median" in flag.reason
    # the printed report names the node, and only it, with that reason
    flags = done.stdout.split("Flags", 1)[1].split("Environment", 1)[0]
    assert "node2" in flags and "slow" in flags
    assert "node0" not in flags and "node1" not in flags
    assert_nothing_left(c, c.node0, c.node1, c.node2)
