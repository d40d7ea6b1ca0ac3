"""`milabench fleet-report`: the report of a fleet run, flagging slow or broken nodes.

    milabench fleet-report [FOLDER] [--format text|markdown|json|html] [--output FILE]
                           [--mad-k K] [--min-gap F] [--tolerance F] [--ignore-env KEY]...
                           [--baseline FILE] [--write-baseline FILE] [--base PATH]

FOLDER is a fleet folder or a folder of fleet runs (its latest, named on stderr); without
it, the latest under `<base>/fleet`. Exit code 0 when no node is flagged, 1 when one is,
2 for a usage or input error (one line). Options, rules and formats: docs/fleet.md.

`milabench fleet` reuses `add_report_arguments`, `thresholds_from_args` and
`report_fleet(folder, args)` so both commands take the same report options.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from milabench.cli.common import add_option, add_render_options


def _fraction(text: str) -> float:
    """``0.1`` or ``10%``; argparse turns a ValueError into a usage error (exit 2)."""
    value = text.strip()
    try:
        number = float(value[:-1]) / 100.0 if value.endswith("%") else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction (0.10 or 10%)") from None
    if not 0 <= number < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be from 0 to below 1 (0.10 = 10%)")
    return number


def _non_negative(text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return number


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the fleet report (shared with `milabench fleet`)."""
    from milabench.fleet.report import (
        DEFAULT_MAD_K,
        DEFAULT_MIN_GAP,
        DEFAULT_TOLERANCE,
        RENDERERS,
    )

    add_render_options(
        parser,
        RENDERERS,
        format_help="output format (default: text)",
        output_help="write the report to FILE (parent folders created) instead of standard output",
    )
    add_option(
        parser,
        "mad-k",
        type=_non_negative,
        default=DEFAULT_MAD_K,
        metavar="K",
        help="slow when below the fleet median by more than K x 1.4826 x MAD "
        f"(median absolute deviation across nodes; default {DEFAULT_MAD_K:g})",
    )
    add_option(
        parser,
        "min-gap",
        type=_fraction,
        default=DEFAULT_MIN_GAP,
        metavar="F",
        help="...and by more than this fraction of the median (default "
        f"{DEFAULT_MIN_GAP:g} = {100 * DEFAULT_MIN_GAP:g}%%)",
    )
    add_option(
        parser,
        "tolerance",
        type=_fraction,
        default=DEFAULT_TOLERANCE,
        metavar="F",
        help="with --baseline: flagged when below the expected rate by more than this fraction"
        f" (default {DEFAULT_TOLERANCE:g})",
    )
    add_option(
        parser,
        "ignore-env",
        action="append",
        default=[],
        metavar="KEY",
        help="an environment key not to compare (repeatable; e.g. cpu_model for a mixed "
        "fleet, torch or torch[GROUP], packages or packages[GROUP])",
    )
    add_option(
        parser,
        "baseline",
        default=None,
        metavar="FILE",
        help="expected rate per benchmark per hardware model (written by --write-baseline)",
    )
    add_option(
        parser,
        "write-baseline",
        default=None,
        metavar="FILE",
        help="write this fleet run's rates as a baseline (.yaml/.yml: YAML, else JSON)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "folder",
        nargs="?",
        default=None,
        metavar="FOLDER",
        help="fleet folder (with fleet.json), or a folder of fleet runs (its latest); "
        "default: the latest under <base>/fleet",
    )
    add_option(
        parser,
        "base",
        default=None,
        metavar="PATH",
        help="base directory (env MILABENCH_BASE; default ./results)",
    )
    add_report_arguments(parser)


def thresholds_from_args(args: argparse.Namespace):
    """`FleetThresholds` from the parsed options (an unknown --ignore-env key: exit 2)."""
    from milabench.fleet.report import FleetThresholds

    ignore: list[str] = []
    for value in getattr(args, "ignore_env", None) or []:
        ignore.extend(k.strip() for k in value.split(",") if k.strip())
    return FleetThresholds(
        mad_k=args.mad_k, min_gap=args.min_gap, tolerance=args.tolerance, ignore_env=tuple(ignore)
    )


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import base_path
    from milabench.fleet.folder import find_fleet_run

    given = Path(args.folder) if args.folder else None
    return report_fleet(find_fleet_run(given, base_path(args)), args)


def report_fleet(folder: Path, args: argparse.Namespace) -> int:
    """Load, compare, render and write the report of one fleet folder; its exit code."""
    from milabench.cli.common import write_rendered
    from milabench.fleet.report import (
        build_fleet_report,
        load_baseline,
        load_fleet,
        render_fleet,
        write_baseline,
    )

    thresholds = thresholds_from_args(args)
    baseline = load_baseline(args.baseline) if args.baseline else None
    data = load_fleet(folder)
    report = build_fleet_report(data, thresholds, baseline)
    text = render_fleet(report, args.format)
    if args.write_baseline:
        written = write_baseline(report, args.write_baseline)
        benches = sum(len(b) for b in written.models.values())
        print(
            f"baseline written to {args.write_baseline} ({len(written.models)} hardware "
            f"model(s), {benches} benchmark rate(s))",
            file=sys.stderr,
        )
    write_rendered(text, args.output, "fleet report")
    return report.exit_code
