"""`milabench install`: one validated environment per install group of the selection.

Exit code 0 when every group is installed or up to date, 1 when any group failed (the
others are still installed). Back-end: option ``install.backend`` (``uv`` | ``pip``) or
``--backend``. With ``--use-current-env`` nothing is created: the active environment is
checked, and requirements are installed into it only with ``--into-current-env``.
``--offline WHEELHOUSE`` installs from a wheelhouse of ``milabench bundle`` only
(`milabench.envs.bundle.install_offline`). On NVIDIA the CUDA build (install variant
``cuda`` or ``cuda12``) is the one the driver runs, printed first; a driver too old for
every build stops the command with one line. ``--dry-run`` prints what each group would
install and starts nothing.
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
    add_option(
        parser,
        "offline",
        default=None,
        metavar="WHEELHOUSE",
        help="install from a wheelhouse written by 'milabench bundle', with no network",
    )
    add_option(
        parser,
        "dry-run",
        action="store_true",
        default=False,
        help="print the CUDA build and what each group would install, then stop",
    )


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import check_requirements, ensure_writable, load_suite_from_args
    from milabench.envs.groups import build_groups
    from milabench.envs.install import install_all, summary_table
    from milabench.errors import UsageError

    if args.into_current_env and not args.use_current_env:
        raise UsageError("--into-current-env needs --use-current-env")
    suite = load_suite_from_args(args)
    check_requirements(suite, args)  # nothing installed for a machine that cannot run it
    if not suite.entries:
        print("nothing to install: no benchmark selected")
        return 0
    groups = build_groups(suite.entries, suite.system)
    # --use-current-env alone installs nothing: the interpreter's own CUDA build is what
    # runs, so the pinned build (its line, its driver check) does not apply
    checks_only = bool(args.use_current_env) and not args.into_current_env
    if suite.system.get("arch") == "cuda" and not checks_only:
        from milabench.envs import driver
        from milabench.machine.accelerators import detect

        chosen = driver.install_check(groups, suite.system, detect().system_info())
        if chosen:
            print(chosen)
    if args.dry_run:
        from pathlib import Path

        from milabench.envs.install import describe_groups

        print(describe_groups(groups, Path.cwd()))
        return 0
    runs = suite.base / "runs"
    ensure_writable(suite.base, runs)
    options = dict(
        force=args.force,
        backend=args.backend,
        into_current_env=args.into_current_env,
        echo=args.verbose,
    )
    if args.offline:
        from milabench.envs.bundle import install_offline

        results, logs = install_offline(groups, suite.system, runs, args.offline, **options)
    else:
        results, logs = install_all(groups, suite.system, runs, **options)
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
        print(f"milabench: error: {failure_line(results)}", file=sys.stderr)
        return 1
    return 0


def failure_line(results, limit: int = 240) -> str:
    """One line naming the failed groups, this host and each group's cause: the line a
    fleet, a batch job or a person reading a node's output sees first."""
    import socket

    failed = [r for r in results if r.failed]
    whys = []
    for r in failed:
        why = r.message if len(r.message) <= limit else r.message[: limit - 3] + "..."
        whys.append(f"{r.group}: {why}")
    names = ", ".join(r.group for r in failed)
    return f"install failed for group(s): {names} on {socket.gethostname()} ({'; '.join(whys)})"
