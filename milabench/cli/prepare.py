"""`milabench prepare`: run each selected benchmark's prepare step (datasets, weights).

Idempotent: a finished dataset is detected and kept. Exit code 1 when a step failed.
"""

from __future__ import annotations

import argparse
import sys

from milabench.cli.common import add_option, add_requirements_option, add_suite_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    add_requirements_option(parser)
    add_option(
        parser,
        "verbose",
        action="store_true",
        default=False,
        help="print the prepare steps' output as it comes",
    )


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import check_requirements, ensure_writable, load_suite_from_args
    from milabench.envs.prepare import prepare_all, summary_table

    suite = load_suite_from_args(args)
    check_requirements(suite, args)  # nothing prepared for a machine that cannot run it
    if not suite.entries:
        print("nothing to prepare: no benchmark selected")
        return 0
    ensure_writable(suite.base, suite.base / "runs")
    results, logs = prepare_all(suite.entries, suite.system, suite.base / "runs", echo=args.verbose)
    print(summary_table(results))
    data_dirs = sorted({str(e.dirs.data) for e in suite.entries.values()})
    print(f"data: {', '.join(d for d in data_dirs if d != 'None')}")
    if logs is not None:
        print(f"logs: {logs}")
    failed = [r.name for r in results if r.failed]
    from milabench.remote.sync import remote_nodes, sync_phase

    if remote_nodes(suite.system) and len(failed) < len(results):
        print(sync_phase(suite.system, suite.base, [suite.base / "data"]))
    if failed:
        print(f"milabench: error: prepare failed for: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
