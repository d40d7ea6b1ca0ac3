"""Multi-node plan methods (registered in `milabench.plan`'s method table).

* ``torchrun``: with ``num_machines: N > 1``, one torchrun launcher per node (main first,
  then N-1 workers in system order) with a static rendezvous on the main node:
  ``torchrun --nnodes=N --node-rank=r --nproc-per-node=P --rdzv-backend=static
  --rdzv-endpoint=<main ip>:<port> --master-addr=<main ip> --master-port=<port> ...``;
  with ``num_machines`` 1 (or absent) the single-node `TorchRun` of `milabench.plan`.
* ``accelerate``: ``accelerate launch --machine_rank r --num_machines N
  --main_process_ip <main ip> --main_process_port <port> --num_processes N*P ...``.
* ``multinode``: an alias of ``torchrun`` for suites that want to say it.

Tags are ``<name>.<job>.<node>`` (job 0), so rank 0's records land in the file named after
the main node. The rendezvous port is option ``multinode.port`` (default 29400).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from milabench.config.entry import Entry, as_entry
from milabench.config.options import checked_number
from milabench.config.topology import DEFAULT_RDZV_PORT, main_node, runs_locally
from milabench.errors import ConfigError
from milabench.plan.spec import ProcessSpec
from milabench.plan.tree import PlanNode, TorchRun, Wrapper, default_nproc, plan_count


class NotEnoughNodes(ConfigError):
    """The system has fewer nodes than the entry's ``num_machines`` (the entry is skipped)."""

    exit_code = 2
    is_skip = True


def unmet_nodes(entry: Entry | Mapping[str, Any], system: dict) -> str | None:
    """The skip reason when the system lacks nodes for ``entry`` (None when enough)."""
    need = as_entry(entry).num_machines
    have = len(system.get("nodes") or [])
    if need > have:
        return f"needs {need} nodes (num_machines), the system has {have}"
    return None


def select_nodes(entry: Entry | Mapping[str, Any], system: dict) -> list[dict]:
    """Main node first, then workers in system order, ``num_machines`` in all."""
    entry = as_entry(entry)
    reason = unmet_nodes(entry, system)
    if reason:
        raise NotEnoughNodes(f"{entry.name}: skipped: {reason}")
    main = main_node(system)
    workers = [n for n in system.get("nodes") or [] if n.get("name") != main.get("name")]
    return [main, *workers][: entry.num_machines]


def rendezvous_port(system: dict) -> int:
    return int(checked_number(system, "multinode.port", DEFAULT_RDZV_PORT))


def _program(argv: list[str]) -> tuple[list[str], bool]:
    """The script part of an inner command, and whether it is a python script."""
    if argv and Path(argv[0]).name.startswith("python"):
        return argv[1:], True
    return argv, False


class MultiNodeLauncher(Wrapper):
    """Base of the per-node launchers: one spec per selected node, tag ``.0.<node>``."""

    def __init__(self, inner: PlanNode, *, executable: str, nproc: int | None = None) -> None:
        super().__init__(inner)
        self.executable = executable
        self.nodes = select_nodes(self.entry, self.system)
        self.nproc = (
            plan_count(self.entry, "nproc", nproc)
            if nproc is not None
            else default_nproc(self.entry, self.system)
        )
        self.port = rendezvous_port(self.system)
        self.main_ip = str(self.nodes[0]["ip"])

    def launcher_args(self, rank: int) -> list[str]:
        raise NotImplementedError

    def wrap(self, spec: ProcessSpec) -> list[ProcessSpec]:
        program, is_python = _program(list(spec.argv))
        out = []
        for rank, node in enumerate(self.nodes):
            # ``local`` says how the runner reaches the node (MILABENCH_FORCE_SSH included).
            node = {**node, "local": runs_locally(node, self.system)}
            argv = [self.executable, *self.launcher_args(rank)]
            if not is_python:
                argv.append(self.no_python_flag)
            argv += program
            env = dict(spec.env)
            env["MILABENCH_NODE_RANK"] = str(rank)
            env["MILABENCH_NUM_MACHINES"] = str(len(self.nodes))
            out.append(
                spec.evolve(
                    tag=[*spec.tag, "0", str(node["name"])],
                    argv=argv,
                    env=env,
                    node=node,
                    data_channel="smuggle",
                )
            )
        return out

    no_python_flag = "--no-python"


class TorchRunNodes(MultiNodeLauncher):
    """torchrun on every selected node with a static rendezvous on the main node."""

    def launcher_args(self, rank: int) -> list[str]:
        n = len(self.nodes)
        return [
            f"--nnodes={n}",
            f"--node-rank={rank}",
            f"--nproc-per-node={self.nproc}",
            "--rdzv-backend=static",
            f"--rdzv-endpoint={self.main_ip}:{self.port}",
            f"--master-addr={self.main_ip}",
            f"--master-port={self.port}",
        ]


class AccelerateNodes(MultiNodeLauncher):
    """``accelerate launch`` on every selected node (also used for a single node)."""

    no_python_flag = "--no_python"

    def launcher_args(self, rank: int) -> list[str]:
        n = len(self.nodes)
        args = ["launch"]
        arch = str(self.system.get("arch") or "cpu")
        if arch == "cpu":
            args.append("--cpu")
        elif n * self.nproc > 1:
            args.append("--multi_gpu")
        return args + [
            f"--machine_rank={rank}",
            f"--num_machines={n}",
            f"--num_processes={n * self.nproc}",
            f"--main_process_ip={self.main_ip}",
            f"--main_process_port={self.port}",
            "--rdzv_backend=static",
        ]


def _executable(pack, name: str) -> str:
    finder = getattr(pack, "executable", None)
    return finder(name) if callable(finder) else name


def _nproc(pack) -> int | None:
    return pack.entry.plan.nproc


def build_torchrun(pack) -> PlanNode:
    """One torchrun per node when ``num_machines > 1``, else the single-node `TorchRun`."""
    if pack.entry.num_machines > 1:
        return TorchRunNodes(
            pack.command_node(), executable=_executable(pack, "torchrun"), nproc=_nproc(pack)
        )
    return TorchRun(pack.command_node())


def build_accelerate(pack) -> PlanNode:
    return AccelerateNodes(
        pack.command_node(), executable=_executable(pack, "accelerate"), nproc=_nproc(pack)
    )
