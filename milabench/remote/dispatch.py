"""`NodeLauncher`: the launcher a multi-node run uses, routing each spec to its node.

Specs whose ``node`` is None or runs locally (`milabench.config.topology.runs_locally`) go to
the local launcher (process groups on this machine); the others go to one `SSHLauncher`,
so every remote node has exactly one SSH connection for the whole run.
"""

from __future__ import annotations

import asyncio

from milabench.config.topology import runs_locally
from milabench.execute.launcher import Launcher, LocalLauncher, ProcessHandle
from milabench.plan.multinode import select_nodes
from milabench.remote.launcher import SSHLauncher


class NodeLauncher(Launcher):
    def __init__(self, system: dict, local: Launcher | None = None) -> None:
        self.system = system
        self.local = local or LocalLauncher()
        self.ssh = SSHLauncher(system)

    def is_remote(self, spec) -> bool:
        return not runs_locally(spec.node, self.system)

    async def start(self, spec) -> ProcessHandle:
        await self.check_group(spec)
        if self.is_remote(spec):
            return await self.ssh.start(spec)
        return await self.local.start(spec)

    async def check_group(self, spec) -> None:
        """For a multi-node benchmark, reach every remote node of it before starting a rank.

        Otherwise the main rank would start, then wait in the rendezvous for a worker that
        can never come until ``max_duration``; this way every rank fails at once, within
        ``ssh.connect_timeout``, naming the node. Connections are reused, so this costs
        one handshake per node per run.
        """
        if spec.entry.num_machines <= 1:
            return
        nodes = [
            n for n in select_nodes(spec.entry, self.system) if not runs_locally(n, self.system)
        ]
        await asyncio.gather(*(self.ssh.pool.connect(n) for n in nodes))

    async def close(self) -> None:
        """Close the SSH connections (call once at the end of the run)."""
        await self.ssh.close()


def needs_remote(specs, system: dict) -> bool:
    """True when at least one spec must run on another node."""
    return any(not runs_locally(s.node, system) for s in specs)


_LAUNCHERS: dict[int, NodeLauncher] = {}


def node_launcher(system: dict | None) -> NodeLauncher:
    """The launcher for ``system`` (one per system object, so connections are reused)."""
    system = system or {}
    launcher = _LAUNCHERS.get(id(system))
    if launcher is None or launcher.system is not system:
        launcher = _LAUNCHERS[id(system)] = NodeLauncher(system)
    return launcher
