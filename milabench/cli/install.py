"""`milabench install`: one validated environment per install group of the selection.

Exit code 0 when every group is installed or up to date, 1 when any group failed (the
others are still installed). Back-end: option ``install.backend`` (``uv`` | ``pip``) or
``--backend``. With ``--use-current-env`` nothing is created: the active environment is
checked, and requirements are installed into it only with ``--into-current-env``.
"""

from __future__ import annotations

import argparse
import sys

from milabench.cli.common import add_option, add_suite_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    add_option(
        parser,
        "force",
        action="store_true",
        default=False,
        help="rebuild every selected environment from scratch",
    )
    add_option(
        parser,
        "backend",
        default=None,
        choices=["uv", "pip"],
        help="installer (default: option install.backend, else uv)",
    )
    add_option(
        parser,
        "into-current-env",
        action="store_true",
        default=False,
        help="with --use-current-env: install the requirements into the active "
        "environment (otherwise it is only checked)",
    )
    add_option(
        parser,
        "verbose",
        action="store_true",
        default=False,
        help="print the installers' output as it comes",
    )


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import ensure_writable, load_suite_from_args
    from milabench.envs.groups import build_groups
    from milabench.envs.install import install_all, summary_table
    from milabench.errors import UsageError

    if args.into_current_env and not args.use_current_env:
        raise UsageError("--into-current-env needs --use-current-env")
    suite = load_suite_from_args(args)
    if not suite.entries:
        print("nothing to install: no benchmark selected")
        return 0
    groups = build_groups(suite.entries, suite.system)
    if suite.system.get("arch") == "cuda":
        from milabench.envs import driver
        from milabench.monitor.accelerators import detect

        info = detect().system_info()
        for group in groups:
            if not group.use_current_env:
                need = driver.required_by_pins(group.requirements)
                driver.check(need, info, f"install group {group.name}")
    runs = suite.base / "runs"
    ensure_writable(suite.base, runs)
    results, logs = install_all(
        groups,
        suite.system,
        runs,
        force=args.force,
        backend=args.backend,
        into_current_env=args.into_current_env,
        echo=args.verbose,
    )
    print(summary_table(results))
    for result in results:
        for note in result.notes:
            print(f"note: {note}")
    if logs is not None:
        print(f"logs: {logs}")
    failed = [r.group for r in results if r.failed]
    installed = [suite.base / "venv" / r.group for r in results if not r.failed]
    if installed and not args.use_current_env:
        from milabench.remote.sync import remote_nodes, sync_phase

        if remote_nodes(suite.system):
            print(sync_phase(suite.system, suite.base, installed))
    if failed:
        print(
            f"milabench: error: install failed for group(s): {', '.join(failed)}", file=sys.stderr
        )
        return 1
    return 0
