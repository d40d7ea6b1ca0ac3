"""`milabench fleet` on real loopback sshd nodes (tests/fleet/conftest.py).

Each test runs the real command (a subprocess, as a user would) on the CPU suite's
``flops-fp32`` entry with the test interpreter's environment on every node, then reads
what it left: its exit code and printed report, ``fleet.json``, the collected run folders,
the nodes' own folders, and the processes still alive. The report's verdicts are checked
with the report module itself (`build_fleet_report`), so that the test asserts the flags,
not the layout of a table.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fleetcluster import (
    HEALTHY_QUOTA_US,
    THROTTLE_QUOTA_US,
    assert_nothing_left,
    by_name,
    fleet_argv,
    fleet_folders,
    read_fleet,
)
from sshnodes import closed_port
from systemtools import cannot_run_here

from milabench.fleet.report import FleetThresholds, build_fleet_report, load_fleet

FLEET_TIMEOUT = 900  # seconds: a generous bound for a loaded 2-core machine
pytestmark = [pytest.mark.ssh, pytest.mark.slow, pytest.mark.timeout(FLEET_TIMEOUT + 300)]


@pytest.fixture
def unthrottled(fleet_cluster):
    """The cluster with every node's CPU quota lifted for this test (it compares no rates)."""
    with fleet_cluster.unthrottled():
        yield fleet_cluster


# The slow rule's minimum gap for these tests. Three "nodes" sharing a loaded 2-core
# machine differ by more than real nodes do: with two threads each, healthy ones measured
# 9-37% apart (CI and this machine); with one thread (cpus=1 below) 2%, but a busy CI host
# may still push them past the default 10%. docs/fleet.md: "raise it for benchmarks known
# to vary". The throttled node is 60% slower, far beyond it.
MIN_GAP = "0.25"
# The rate comparisons need rates, not the suite's +-2% ones: a shorter window (the
# throttled node is 2.5x slower; a node's rate is known within +-5% in seconds).
SHORT = (
    *("--override", "flops-fp32.measure.warmup_max=3s"),
    *("--override", "flops-fp32.measure.min=2s"),
    *("--override", "flops-fp32.measure.max=8s"),
    *("--override", "flops-fp32.measure.precision=0.05"),
)


def _report(folder: Path):
    return build_fleet_report(load_fleet(folder), FleetThresholds(min_gap=float(MIN_GAP)))


def _run_files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


@pytest.mark.quiet  # compares the nodes' rates: runs alone
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
    base = c.main / "throttled"
    throttled_before = c.node2.cgroup.throttled_periods()
    done = _run_fleet(c, fleet_argv(c, system, base, "--min-gap", MIN_GAP, *SHORT))
    print(done.stdout)
    print(done.stderr, file=sys.stderr)
    assert done.returncode == 1, done.stdout + done.stderr
    (folder,) = fleet_folders(base)
    doc = read_fleet(folder)
    nodes = by_name(doc)
    assert {n: v["status"] for n, v in nodes.items()} == {
        "node0": "ok",
        "node1": "ok",
        "node2": "ok",
    }, doc
    assert doc["ended"] is not None
    for name in nodes:
        files = _run_files(folder / "nodes" / name)
        assert {"flops-fp32.D0.data", "report.json", "report.md"} <= files, (name, files)
    report = _report(folder)
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


@pytest.mark.quiet  # compares the nodes' rates: runs alone
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
        base = c.main / "healthy"
        done = _run_fleet(c, fleet_argv(c, system, base, "--min-gap", MIN_GAP, *SHORT))
    finally:
        if c.node2.cgroup is not None:
            c.node2.cgroup.set_quota(THROTTLE_QUOTA_US)
    print(done.stdout)
    print(done.stderr, file=sys.stderr)
    (folder,) = fleet_folders(base)
    doc = read_fleet(folder)
    report = _report(folder)
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
        assert _run_files(on_node) == _run_files(folder / "nodes" / name)
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
            assert not _node_sees(c, c.node1, path), path
        assert _node_sees(c, c.node1, c.bases / "node1" / "code" / doc["name"] / "pkg")
    assert_nothing_left(c, c.node0, c.node1, c.node2)


def _node_sees(c, node, path: Path) -> bool:
    """Whether ``path`` exists for commands run on ``node`` (over its own sshd)."""
    argv = ["ssh", "-p", str(node.port), "-i", str(c.ssh.client_key), "-o", "BatchMode=yes"]
    argv += ["-o", f"UserKnownHostsFile={c.ssh.known_hosts}", f"{node.user}@{node.ip}"]
    done = subprocess.run([*argv, "test", "-e", str(path)], capture_output=True, timeout=60)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


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


def _start_fleet(c, argv: list[str]) -> subprocess.Popen:
    """``python -m milabench ARGV`` from the frozen copy of the tool, in the background.

    As `clirun.milabench` does: the caller's ``MILABENCH_*`` variables dropped, no
    dashboard. The working folder is the main node's test folder: ``python -m`` puts the
    working folder first on ``sys.path``, and the repository's own folder would shadow
    the frozen copy.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILABENCH_")}
    env.update({"MILABENCH_DASH": "no", **c.env})
    return subprocess.Popen(
        [sys.executable, "-m", "milabench", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=c.main,
    )


def _run_fleet(c, argv: list[str]) -> subprocess.CompletedProcess:
    proc = _start_fleet(c, argv)
    try:
        out, err = proc.communicate(timeout=FLEET_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


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
    proc = _start_fleet(c, fleet_argv(c, system, base))
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
        assert (folder / "nodes" / name / "flops-fp32.D0.data").is_file()
    report = _report(folder)
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
    proc = _start_fleet(c, fleet_argv(c, system, base))
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
    proc = _start_fleet(c, fleet_argv(c, path, base))
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
    done = _run_fleet(c, fleet_argv(c, system, base, "--phases", "install,prepare"))
    assert done.returncode == 0, done.stdout + done.stderr
    (folder,) = fleet_folders(base)
    nodes = by_name(read_fleet(folder))
    for name in ("node0", "node2"):
        node = nodes[name]
        assert (node["status"], node["via"], node["code"]) == ("ok", "ssh", "shared"), node
        own = base / "nodes" / name
        assert node["base"] == str(own)
        assert (own / "system.yaml").is_file() and (own / "venv" / "torch").is_dir()
        assert [p.name for p in (own / "runs").iterdir() if p.name.startswith("install.")]
    assert not (base / "code").exists()  # nothing was copied
    assert "node0  ok" in done.stdout and "node2  ok" in done.stdout
    assert_nothing_left(c, c.node0, c.node2)
