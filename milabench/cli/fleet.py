"""`milabench fleet`: run the single-node suite on every node at once, then the fleet report.

    milabench fleet --system nodes.yaml [--config SUITE] [--select A,B] [--base PATH]
                    [--concurrency 8] [--phases install,prepare,run] [--node-python PATH]
                    [report options of `milabench fleet-report`: --format --output --mad-k
                     --min-gap --tolerance --ignore-env --baseline --write-baseline]

Every node of the system file installs, prepares and runs the selected single-node
entries as its own single-node machine (`milabench.fleet`), all runs at the same time;
the run folders are collected into ``<base>/fleet/fleet.<time>/`` and the fleet report
(`milabench.fleet.report`) is printed (without the run phase: one status line per node).
Exit code: the report's (0 when no node is
flagged, failed or unreachable, 1 otherwise), 2 for a usage or configuration error,
130 after Ctrl-C and 143 after SIGTERM (``fleet.json`` and the partial report are written
first). docs/multinode.md, "Validate a new rack".
"""

from __future__ import annotations

import argparse
import sys

from milabench.cli.common import add_option, add_suite_options


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from milabench.cli.fleet_report import add_report_arguments
    from milabench.fleet.orchestrate import DEFAULT_GRACE

    add_suite_options(parser)
    add_option(
        parser,
        "concurrency",
        type=_positive_int,
        default=8,
        metavar="N",
        help="nodes being reached, copied to, installed or prepared at once (default 8); "
        "the runs themselves always start on every node together",
    )
    add_option(
        parser,
        "phases",
        default=None,
        metavar="LIST",
        help="phases to run on each node, among install,prepare,run (default: all three; "
        "`--phases run` re-runs on nodes already installed and prepared)",
    )
    add_option(
        parser,
        "node-python",
        default=None,
        metavar="PATH",
        help="Python that runs milabench on every node (env MILABENCH_FLEET_PYTHON, option "
        "fleet.python; default: this interpreter on this machine, python3 on the others)",
    )
    add_option(
        parser,
        "ignore-doctor",
        action="store_true",
        default=False,
        help="measure nodes whose `milabench doctor` finds a failure (by default such a node "
        "is reported, not measured)",
    )
    add_option(
        parser,
        "grace",
        type=_seconds,
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help=f"after Ctrl-C/SIGTERM, seconds each node gets to stop before SIGKILL "
        f"(default {DEFAULT_GRACE:g})",
    )
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import (
        base_path,
        ensure_writable,
        load_suite_from_args,
        split_csv,
        strict_mode,
    )
    from milabench.cli.fleet_report import report_fleet, thresholds_from_args
    from milabench.fleet.nodeplan import parse_phases
    from milabench.fleet.orchestrate import FleetOptions, run_fleet

    phases = parse_phases(args.phases)
    thresholds_from_args(args)  # a bad report option fails before any node is touched
    if args.baseline:
        from milabench.fleet.report import load_baseline

        load_baseline(args.baseline)
    suite = load_suite_from_args(args)
    base = base_path(args)
    ensure_writable(base, base / "fleet")
    options = FleetOptions(
        select=split_csv(args.select),
        exclude=split_csv(args.exclude),
        overrides=list(args.override or []),
        use_current_env=bool(args.use_current_env),
        strict=strict_mode(args),
        concurrency=args.concurrency,
        node_python=args.node_python,
        phases=phases,
        grace=args.grace,
        ignore_doctor=bool(args.ignore_doctor),
    )
    result = run_fleet(suite, options)
    print(f"fleet folder: {result.folder.path}", file=sys.stderr, flush=True)
    if "run" in phases:
        code = report_fleet(result.folder.path, args)
    else:
        code = _print_statuses(result.folder.nodes)
    if result.signal is not None:
        return 128 + int(result.signal)
    if code == 0 and any(n.status != "ok" for n in result.folder.nodes):
        code = 1  # the report must not pass a fleet with a failed node, whatever it says
    return code


def _print_statuses(nodes) -> int:
    """Without a run there are no rates to compare: one line per node, exit 1 when some
    node is not ready (the report would only say that no node has a run folder)."""
    width = max(len(n.name) for n in nodes) if nodes else 0
    for node in nodes:
        reason = f"  {node.reason}" if node.reason else ""
        print(f"{node.name:<{width}}  {node.status}{reason}")
    return 0 if all(n.status == "ok" for n in nodes) else 1
