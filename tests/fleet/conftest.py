"""The session's three loopback sshd nodes for `milabench fleet` (see fleetcluster.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # fleetcluster (import mode is importlib)

from fleetcluster import (
    HEALTHY_QUOTA_US,
    QUOTA_PERIOD_US,
    THROTTLE_QUOTA_US,
    FleetCluster,
    can_hide,
    snapshot_tool,
)
from sshnodes import SSHNodes, cgroup_v1_cpu_problem, ensure_sshd, folders_to_hide
from systemtools import require, require_root, unavailable

from milabench.remote.facts import local_package_dir


@pytest.fixture(scope="session")
def fleet_cluster(tmp_path_factory):
    sshd = ensure_sshd()
    require_root("the sshd nodes (they log in as the current user, root)")
    require("rsync", "unshare")
    root = tmp_path_factory.mktemp("fleet")
    main = root / "main"
    main.mkdir()
    bases = root / "bases"
    bases.mkdir()
    tool = snapshot_tool(root / "tool")
    keys = root / "ssh"
    keys.mkdir()
    ssh = SSHNodes(keys, sshd)
    throttle_problem = cgroup_v1_cpu_problem()
    hidden = can_hide()
    try:
        healthy = None if throttle_problem else HEALTHY_QUOTA_US
        period = QUOTA_PERIOD_US
        node0 = ssh.start("node0", "127.0.0.1", cpu_quota=healthy, cpu_period=period)
        node1 = ssh.start(
            "node1",
            "127.0.0.2",
            cpu_quota=healthy,
            cpu_period=period,
            without_rsync=True,
            hide=(str(main), str(tool), *folders_to_hide(local_package_dir())) if hidden else (),
        )
        node2 = ssh.start(
            "node2",
            "127.0.0.3",
            cpu_quota=None if throttle_problem else THROTTLE_QUOTA_US,
            cpu_period=period,
        )
    except RuntimeError as err:
        ssh.close()
        unavailable(f"sshd could not start: {err}")
    try:
        yield FleetCluster(ssh, node0, node1, node2, main, tool, bases, throttle_problem, hidden)
    finally:
        ssh.close()
