"""`milabench report`: statistics, score and validation verdicts of run folders.

    milabench report [--runs DIR [DIR...]] [--format text|markdown|csv|json|html]
                     [--output FILE] [--config SUITE] [--validations a,b|all]

Without `--runs`: the latest run under `<base>/runs` (--base, else MILABENCH_BASE, else
./results). A `--runs` folder that holds runs (`<base>/runs`, or the base) gives its
latest run; either way the run picked is named on stderr. A folder with no run data is a
one-line error (exit 2).

With `--config` (or MILABENCH_SUITE), the suite's entries give the weights (benchmarks that did not run count
in the score with their reason). The exit code is 0 exactly when the printed verdict is
PASS (`milabench.rundata.outcome.run_verdict`: something was measured, the failure rate is
at most 1%, every enabled validation layer passed); a FAIL prints each reason.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from milabench.cli.common import (
    add_option,
    add_render_options,
    add_suite_options,
    add_validations_option,
    write_rendered,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from milabench.report import RENDERERS

    add_option(
        parser,
        "runs",
        nargs="+",
        action="extend",
        default=[],
        metavar="DIR",
        help="run folders (runs/<name>) to report on; a folder of runs gives its latest "
        "(default: the latest run under <base>/runs)",
    )
    add_render_options(
        parser,
        RENDERERS,
        format_help="output format (default: text)",
        output_help="write the report to FILE instead of standard output",
    )
    add_option(
        parser,
        "peaks",
        default=None,
        metavar="FILE",
        help="device peak TFLOPS for the MFU column, merged over config/peaks.yaml "
        "(env MILABENCH_PEAKS)",
    )
    add_validations_option(
        parser, "validation layers to add (error, ensure_rate, version are on by default)"
    )
    add_suite_options(parser)


def suite_entries(args: argparse.Namespace) -> dict | None:
    """Entries of the suite named by --config or MILABENCH_SUITE (None when no suite was
    given): all of them, or the ones `--select`/`--exclude` keep, so that a report of a
    selected run scores what `milabench run --select` scored (unselected entries are not
    "not run")."""
    from milabench.cli.common import given_config, load_suite_from_args

    if given_config(args) is None:
        return None
    suite = load_suite_from_args(args)
    if getattr(args, "select", None) or getattr(args, "exclude", None):
        return suite.entries
    return suite.all_entries


def run_folders(args: argparse.Namespace) -> list[Path]:
    """The run folders to report on: --runs (a folder of runs gives its latest), else the
    latest run under the base."""
    from milabench.cli.common import base_path
    from milabench.report.locate import expand_run_folder, latest_runs

    if not args.runs:
        return latest_runs(base_path(args) / "runs", 1, "report")
    return [d for p in args.runs for d in expand_run_folder(Path(p), "report")]


def run(args: argparse.Namespace) -> int:
    from milabench.report import build_report, render
    from milabench.report.efficiency import load_peaks

    peaks = load_peaks(args.peaks)  # a bad file is one line naming it, before any reading
    report = build_report(
        run_folders(args), entries=suite_entries(args), validations=args.validations, peaks=peaks
    )
    write_rendered(render(report, args.format), args.output, "report")
    return report.exit_code
