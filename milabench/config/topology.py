"""Which nodes are reached over SSH, and how: node facts that plans and back-ends share.

Pure functions of the system mapping (and ``MILABENCH_FORCE_SSH``): the multi-node plan
methods (`milabench.plan.multinode`) and the SSH back-end (`milabench.remote`) both read
them, so they live below both.

The tool runs on the main node. A node whose address is this machine runs its commands
locally, without SSH. Tests (and people debugging) need to make a loopback "node" behave
like a remote one, so two explicit switches override the detection:

* a node with ``local: false`` in the system file is always reached over SSH;
* ``MILABENCH_FORCE_SSH=1`` reaches every node except the main one over SSH
  (``MILABENCH_FORCE_SSH=all`` includes the main node too).
"""

from __future__ import annotations

import os
from typing import Any

from milabench.config.options import get_option as _get_option
from milabench.config.system import is_local

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_RDZV_PORT = 29400


def get_option(system: dict | None, key: str, default: Any) -> Any:
    """The option tree lookup of the contract (env > system.options > default)."""
    return _get_option(system or {}, key, default)


def node_label(node: dict) -> str:
    """How a node is named in messages: ``node1 (user@10.0.0.2:22)``."""
    return f"{node.get('name')} ({node.get('user')}@{node.get('ip')}:{node_port(node)})"


def node_port(node: dict) -> int:
    return int(node.get("port") or node.get("sshport") or 22)


def main_node(system: dict) -> dict:
    """The rank-0 node: the one marked ``main``, else the first one."""
    nodes = system.get("nodes") or []
    if not nodes:
        raise ValueError("system has no nodes")
    for node in nodes:
        if node.get("main"):
            return node
    return nodes[0]


def _address_is_this_machine(node: dict) -> bool:
    return bool(is_local(node))


def force_ssh_mode() -> str:
    """``""`` (detect), ``"workers"`` (MILABENCH_FORCE_SSH=1) or ``"all"``."""
    value = os.environ.get("MILABENCH_FORCE_SSH", "").strip().lower()
    if value in ("", "0", "false", "no"):
        return ""
    return "all" if value == "all" else "workers"


def runs_locally(node: dict | None, system: dict | None = None) -> bool:
    """True when commands for ``node`` run on this machine without SSH."""
    if node is None:
        return True
    if node.get("local") is False:
        return False
    mode = force_ssh_mode()
    if mode == "all":
        return False
    if mode == "workers":
        is_main = bool(node.get("main")) or (
            system is not None and main_node(system).get("name") == node.get("name")
        )
        if not is_main:
            return False
    if node.get("local") is True:
        return True
    return _address_is_this_machine(node)


def remote_nodes(system: dict) -> list[dict]:
    """The nodes reached over SSH, in system order."""
    return [n for n in system.get("nodes") or [] if not runs_locally(n, system)]
