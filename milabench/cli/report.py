"""`milabench report`: statistics, score and validation verdicts of run folders.

    milabench report --runs DIR [DIR...] [--format text|markdown|csv|json|html]
                     [--output FILE] [--config SUITE] [--validations a,b|all]

With `--config`, the suite's entries give the weights (benchmarks that did not run count
in the score with their reason). The exit code is 0 exactly when the printed verdict is
PASS (`milabench.report.outcome.run_verdict`: something was measured, the failure rate is
at most 1%, every enabled validation layer passed); a FAIL prints each reason.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from milabench.cli.common import add_option, add_suite_options, add_validations_option


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_option(
        parser,
        "runs",
        nargs="+",
        action="extend",
        default=[],
        metavar="DIR",
        help="run folders (runs/<name>) to report on",
    )
    add_option(
        parser,
        "format",
        default="text",
        choices=["text", "markdown", "md", "csv", "json", "html"],
        help="output format (default: text)",
    )
    add_option(
        parser,
        "output",
        default=None,
        metavar="FILE",
        help="write the report to FILE instead of standard output",
    )
    add_validations_option(
        parser, "validation layers to add (error, ensure_rate, version are on by default)"
    )
    add_suite_options(parser)


def suite_entries(args: argparse.Namespace) -> dict | None:
    """Entries of the suite named by --config (None when no suite was given): all of them,
    or the ones `--select`/`--exclude` keep, so that a report of a selected run scores
    what `milabench run --select` scored (unselected entries are not "not run")."""
    if not getattr(args, "config", None):
        return None
    from milabench.cli.common import load_suite_from_args

    suite = load_suite_from_args(args)
    if getattr(args, "select", None) or getattr(args, "exclude", None):
        return suite.entries
    return suite.all_entries


def run(args: argparse.Namespace) -> int:
    from milabench.errors import UsageError
    from milabench.report import build_report, render

    if not args.runs:
        raise UsageError("milabench report: give at least one run folder with --runs DIR")
    report = build_report(
        [Path(p) for p in args.runs], entries=suite_entries(args), validations=args.validations
    )
    text = render(report, args.format)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"report written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return report.exit_code
