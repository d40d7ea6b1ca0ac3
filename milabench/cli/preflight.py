"""`milabench preflight`: check every node of the system before a multi-node run.

Prints one row per node (reachable and in how long, Python, torch, accelerators,
rendezvous port, how the code reaches it), the versions every node must share (Python,
milabench, package lists of the install groups: one ``FAIL`` line per differing node),
`milabench doctor`'s checks on every node (run by the node's own Python before anything
is copied: a failure fails the preflight unless --ignore-doctor), and the bandwidth and
latency of a real all-reduce across all nodes. Exit code 0 when everything passed, 1
(NodeError) naming the first failing node otherwise.
"""

from __future__ import annotations

import argparse
import sys

from milabench.cli.common import add_option, add_suite_options, load_suite_from_args
from milabench.errors import NodeError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    add_option(
        parser,
        "port",
        type=int,
        default=None,
        help="rendezvous port to check and use (default: option multinode.port, 29400)",
    )
    add_option(
        parser,
        "python",
        default=None,
        metavar="PATH",
        help="interpreter to probe and run the all-reduce with "
        "(default: the benchmarks' environment, or this one with --use-current-env)",
    )
    add_option(
        parser,
        "size-mib",
        type=float,
        default=16.0,
        help="all-reduce tensor size in MiB (default 16)",
    )
    add_option(parser, "iters", type=int, default=5, help="timed all-reduce repetitions")
    add_option(
        parser,
        "timeout",
        type=float,
        default=60.0,
        help="seconds allowed for the all-reduce (default 60)",
    )
    add_option(
        parser, "no-allreduce", action="store_true", default=False, help="only check the nodes"
    )
    add_option(
        parser,
        "node-python",
        default=None,
        metavar="PATH",
        help="Python that runs milabench (and the doctor's checks) on every node (option "
        "fleet.python; default: this interpreter here, python3 on the others)",
    )
    add_option(
        parser,
        "ignore-doctor",
        action="store_true",
        default=False,
        help="go on when `milabench doctor` finds a failure on a node",
    )
    add_option(
        parser, "no-doctor", action="store_true", default=False, help="skip the doctor's checks"
    )
    add_option(
        parser,
        "no-versions",
        action="store_true",
        default=False,
        help="do not copy the code to the workers nor compare the nodes' versions",
    )


def _environments(suite, use_current_env: bool) -> tuple[str, list[str]]:
    """The interpreter to use and the environment folders every node must have."""
    entries = list(suite.entries.values())
    if use_current_env or not entries:
        return sys.executable, []
    venvs: list[str] = []
    for entry in entries:
        venv = str(entry.dirs.venv or "")
        if venv and venv not in venvs:
            venvs.append(venv)
    # The all-reduce needs torch: prefer a torch-ish group's environment.
    preferred = next(
        (v for v in venvs if "torch" in v.rsplit("/", 1)[-1]), venvs[0] if venvs else None
    )
    if preferred is None:
        return sys.executable, []
    return f"{preferred}/bin/python", venvs


def run(args: argparse.Namespace) -> int:
    import asyncio

    from milabench.config.options import checked_number
    from milabench.config.topology import DEFAULT_RDZV_PORT
    from milabench.remote.codesync import code_paths, run_venvs
    from milabench.remote.preflight import preflight, render

    suite = load_suite_from_args(args)
    system = suite.system
    python, envs = _environments(suite, bool(args.use_current_env))
    if args.python:
        python = args.python
    port = args.port or int(checked_number(system, "multinode.port", DEFAULT_RDZV_PORT))
    result = asyncio.run(
        preflight(
            system,
            python=python,
            envs=envs,
            port=port,
            allreduce=not args.no_allreduce,
            size_mib=args.size_mib,
            iters=args.iters,
            timeout=args.timeout,
            base=suite.base,
            code_paths=code_paths(suite),
            venvs=run_venvs(suite),
            versions=not args.no_versions,
            node_python=_node_pythons(system, args.node_python),
            doctor=not args.no_doctor,
            ignore_doctor=args.ignore_doctor,
        )
    )
    print(render(result), flush=True)
    if not result.ok:
        raise NodeError(result.failures[0])
    return 0


def _node_pythons(system: dict, given: str | None) -> dict[str, str]:
    """The Python that runs milabench on each node: ``--node-python``, else the
    ``fleet.python`` option, else this interpreter for a local node, python3 elsewhere
    (the rule of `milabench fleet`)."""
    from milabench.config.options import get_option
    from milabench.config.topology import runs_locally

    configured = given or get_option(system, "fleet.python", None)
    return {
        str(node["name"]): str(configured)
        if configured
        else (sys.executable if runs_locally(node, system) else "python3")
        for node in system.get("nodes") or []
    }
