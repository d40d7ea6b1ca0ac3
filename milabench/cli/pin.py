"""`milabench pin`: compile pinned ``requirements.<variant>.txt`` files per install group.

All benchmarks of an install group resolve to the same versions (a group lock is
compiled first, then each benchmark under it; see `milabench.envs.pin`). Exit code 1
when a group could not be resolved.
"""

from __future__ import annotations

import argparse
import sys

from milabench.cli.common import add_option, add_suite_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    parser.add_argument(
        "--variant",
        "--arch",
        dest="variant",
        default=None,
        metavar="ARCH",
        help="which requirements.<ARCH>.txt to write and which "
        "constraints/<ARCH>.txt to honour (default: the system arch)",
    )
    add_option(
        parser, "verbose", action="store_true", default=False, help="print uv's output as it comes"
    )


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import load_suite_from_args
    from milabench.envs.pin import pin_all

    suite = load_suite_from_args(args)
    if not suite.entries:
        print("nothing to pin: no benchmark selected")
        return 0
    results, logs = pin_all(
        suite.entries, suite.system, suite.base / "runs", variant=args.variant, echo=args.verbose
    )
    for r in results:
        status = "ok" if r.ok else "failed"
        files = ", ".join(str(p) for p in r.written)
        detail = r.message if not r.ok or not files else files
        print(f"{r.group}: {status} ({r.seconds:.1f} s) {detail}".rstrip())
    if logs is not None:
        print(f"logs: {logs}")
    failed = [r.group for r in results if not r.ok]
    if failed:
        print(f"milabench: error: pin failed for group(s): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
