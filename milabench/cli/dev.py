"""`milabench dev <bench> [-- CMD ARGS]`: a shell (or one command) in a benchmark's env.

The shell or command runs in the benchmark's folder with its environment's ``bin`` first
on ``PATH`` and every variable a run gets (upstream: ``milabench tools shell``). With a
command, its exit code is returned. Options may come before or after ``BENCH``; what
follows ``--`` is the command.
"""

from __future__ import annotations

import argparse

from milabench.cli.common import add_suite_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser, selection=False)
    parser.add_argument("bench", metavar="BENCH", help="benchmark (entry) name")
    parser.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ARGS",
        help="command to run instead of an interactive shell",
    )


def split_rest(rest: list[str]) -> tuple[list[str], list[str]]:
    """Options written after BENCH, and the command (after ``--``, or a bare command)."""
    if "--" in rest:
        i = rest.index("--")
        return rest[:i], rest[i + 1 :]
    if rest and rest[0].startswith("-"):
        return rest, []
    return [], rest


def run(args: argparse.Namespace) -> int:
    from milabench.cli.common import load_suite_from_args
    from milabench.envs.dev import default_shell, dev_environment, find_entry, run_in_env

    options, command = split_rest(list(args.rest or []))
    if options:  # argparse's REMAINDER swallowed options given after BENCH: read them now
        late = argparse.ArgumentParser(prog="milabench dev", add_help=False)
        add_suite_options(late, selection=False)
        late.parse_args(options, namespace=args)
    suite = load_suite_from_args(args)
    entry = find_entry(args.bench, suite.entries)
    env, cwd = dev_environment(entry, suite.system)
    # `MILABENCH_CONFIG` is the entry's JSON here: a `milabench` started in the shell finds
    # the suite it came from under `MILABENCH_SUITE` (docs/config.md).
    env["MILABENCH_SUITE"] = str(suite.config_path)
    if not command:
        where = env.get("VIRTUAL_ENV") or "the current environment"
        print(f"milabench dev: {entry.name} in {where} (exit the shell to leave)")
        command = default_shell(env)
    return run_in_env(command, env, cwd)
