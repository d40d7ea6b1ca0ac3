"""`milabench fleet` on real loopback sshd nodes (tests/fleet/conftest.py): nodes lost,
unreachable or silent, signals, and the folders of nodes that share a base.

Each test runs the real command (a subprocess, as a user would) on the paced suite's
entry (tests/fleet/paced/suite.yaml: stdlib steps that sleep, an environment with nothing
to install) with the test interpreter on every node, then reads
what it left: its exit code and printed report, ``fleet.json``, the collected run folders,
the nodes' own folders, and the processes still alive. None compares rates (the node
quotas are lifted: ``unthrottled``), so they may share the machine with other tests;
the rate comparisons, which are quiet, are in test_fleet_rates.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml
from fleetcluster import (
    FLEET_TIMEOUT,
    assert_nothing_left,
    by_name,
    fleet_argv,
    fleet_folders,
    fleet_report,
    read_fleet,
    run_fleet,
    start_fleet,
)
from sshnodes import closed_port

pytestmark = [pytest.mark.ssh, pytest.mark.slow, pytest.mark.timeout(FLEET_TIMEOUT + 300)]


@pytest.fixture
def unthrottled(fleet_cluster):
    """The cluster with every node's CPU quota lifted for this test (it compares no rates)."""
    with fleet_cluster.unthrottled():
        yield fleet_cluster


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _phases(base: Path) -> dict[str, str]:
    try:
        (folder,) = fleet_folders(base)
        return {n["name"]: n["phase"] for n in read_fleet(folder)["nodes"]}
    except (ValueError, OSError, json.JSONDecodeError, FileNotFoundError):
        return {}


def test_lost_and_unreachable_nodes_are_named_while_others_finish(unthrottled, tmp_path):
    """(iii)+(v) A node whose sshd (and everything under it) dies mid-run is "lost"; a
    node nobody listens for is "unreachable"; the other two finish and their results are
    in the fleet folder. The main node runs locally (no SSH for it)."""
    c = unthrottled
    doomed = c.ssh.start("doomed", "127.0.0.7")
    ghost_port = closed_port("127.0.0.8")
    ghost = {"name": "ghost", "ip": "127.0.0.8", "port": ghost_port, "user": c.ssh.user}
    nodes = [
        c.entry(c.node0, local=True, main=True),
        c.entry(c.node1),
        c.entry(doomed),
        {**ghost, "local": False, "base": str(c.bases / "ghost")},
    ]
    system = c.system_file(tmp_path / "system.yaml", nodes)
    base = c.main / "lost"
    proc = start_fleet(c, fleet_argv(c, system, base, paced=True))
    try:
        _wait_for(
            lambda: (
                all(_phases(base).get(n) == "run" for n in ("node0", "node1", "doomed"))
                or proc.poll() is not None
            ),
            FLEET_TIMEOUT / 2,
            "every reachable node to start its run",
        )
        assert proc.poll() is None, proc.communicate()
        time.sleep(2.0)
        doomed.kill_everything()
        out, err = proc.communicate(timeout=FLEET_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    print(out)
    print(err, file=sys.stderr)
    assert proc.returncode == 1, out + err
    (folder,) = fleet_folders(base)
    doc = read_fleet(folder)
    found = by_name(doc)
    assert found["doomed"]["status"] == "lost", found["doomed"]
    assert "connection lost during run" in found["doomed"]["reason"]
    assert found["ghost"]["status"] == "unreachable", found["ghost"]
    assert "refused" in found["ghost"]["reason"]
    assert found["node0"]["via"] == "local" and found["node1"]["via"] == "ssh"
    for name in ("node0", "node1"):
        assert found[name]["status"] == "ok", found[name]
        assert (folder / "nodes" / name / "report.json").is_file()
        assert (folder / "nodes" / name / "paced.0.data").is_file()
    report = fleet_report(folder)
    assert set(report.flagged_nodes) == {"doomed", "ghost"}, report.flagged
    for name in ("doomed", "ghost"):
        assert name in out
    assert_nothing_left(c, c.node0, c.node1)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_every_node_and_leaves_valid_fleet_json(unthrottled, tmp_path, signum):
    """Ctrl-C / SIGTERM during the runs: every node's processes stopped (none left),
    fleet.json complete and valid, partial run folders collected, exit 130 / 143."""
    c = unthrottled
    system = c.system_file(tmp_path / "system.yaml", [c.entry(c.node0), c.entry(c.node1)])
    base = c.main / f"signal-{signum.name}"
    proc = start_fleet(c, fleet_argv(c, system, base, paced=True))
    try:
        _wait_for(
            lambda: (
                all(_phases(base).get(n) == "run" for n in ("node0", "node1"))
                or proc.poll() is not None
            ),
            FLEET_TIMEOUT / 2,
            "both nodes to start their run",
        )
        assert proc.poll() is None, proc.communicate()
        time.sleep(3.0)
        sent = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    print(out)
    print(err, file=sys.stderr)
    assert proc.returncode == 128 + signum, (proc.returncode, err)
    (folder,) = fleet_folders(base)
    doc = read_fleet(folder)
    assert doc["ended"] is not None
    for node in doc["nodes"]:
        assert node["status"] == "run-failed", node
        assert f"interrupted ({signum.name})" in node["reason"]
        assert node["run"] == f"nodes/{node['name']}"
        assert (folder / node["run"] / "report.json").is_file()  # the partial report
    assert_nothing_left(c, c.node0, c.node1)
    print(f"stopped {took:.1f} s after {signum.name}")


def test_a_node_that_goes_silent_is_lost_by_keepalive(unthrottled, tmp_path):
    """A node whose every process is frozen (SIGSTOP: no FIN, no RST, like a hung machine)
    is found "lost" by the SSH keepalives (here 1 s x 3) while node0 finishes."""
    c = unthrottled
    frozen = c.ssh.start("frozen", "127.0.0.9")
    nodes = [c.entry(c.node0), c.entry(frozen)]
    system = c.ssh.system(nodes)
    system["options"]["ssh"]["connect_timeout"] = 3
    system["options"]["fleet"] = {"keepalive_interval": 1, "keepalive_count": 3}
    path = tmp_path / "system.yaml"
    path.write_text(yaml.safe_dump({"system": system}))
    base = c.main / "frozen"
    proc = start_fleet(c, fleet_argv(c, path, base, paced=True))
    try:
        _wait_for(
            lambda: (
                all(_phases(base).get(n) == "run" for n in ("node0", "frozen"))
                or proc.poll() is not None
            ),
            FLEET_TIMEOUT / 2,
            "both nodes to start their run",
        )
        assert proc.poll() is None, proc.communicate()
        time.sleep(2.0)
        stopped = [frozen.proc.pid] + [p.pid for p in frozen.sessions()]
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        out, err = proc.communicate(timeout=FLEET_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        frozen.kill_everything()
    print(out)
    print(err, file=sys.stderr)
    assert proc.returncode == 1, out + err
    (folder,) = fleet_folders(base)
    found = by_name(read_fleet(folder))
    assert found["frozen"]["status"] == "lost", found["frozen"]
    assert "connection lost during run" in found["frozen"]["reason"]
    assert found["node0"]["status"] == "ok", found["node0"]
    assert (folder / "nodes" / "node0" / "report.json").is_file()
    assert_nothing_left(c, c.node0)


def test_nodes_sharing_the_main_base_get_their_own_subfolders(unthrottled, tmp_path):
    """SSH nodes without a ``base:`` of their own see the main node's base (the same
    filesystem): nothing is copied, and each node still works in ``<base>/nodes/<node>``
    so that none overwrites another's environments or runs."""
    c = unthrottled
    system = c.system_file(tmp_path / "system.yaml", [c.node0.system_node(), c.node2.system_node()])
    base = c.main / "shared"
    done = run_fleet(c, fleet_argv(c, system, base, "--phases", "install,prepare", paced=True))
    assert done.returncode == 0, done.stdout + done.stderr
    (folder,) = fleet_folders(base)
    nodes = by_name(read_fleet(folder))
    for name in ("node0", "node2"):
        node = nodes[name]
        assert (node["status"], node["via"], node["code"]) == ("ok", "ssh", "shared"), node
        own = base / "nodes" / name
        assert node["base"] == str(own)
        assert (own / "system.yaml").is_file() and (own / "venv" / "paced").is_dir()
        assert [p.name for p in (own / "runs").iterdir() if p.name.startswith("install.")]
    assert not (base / "code").exists()  # nothing was copied
    assert "node0  ok" in done.stdout and "node2  ok" in done.stdout
    assert_nothing_left(c, c.node0, c.node2)
