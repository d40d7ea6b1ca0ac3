"""`milabench machine`: print the machine metadata record (the `meta` event), as JSON.

The same record every run file starts with: CPU, OS, accelerators, date, milabench version
and commit, Python version, the option values in force (secrets redacted), and the
framework versions found in the current environment. The commit is the checkout's HEAD,
else ``MILABENCH_COMMIT`` (a copy of the code without ``.git``).
"""

from __future__ import annotations

import argparse
import json
import sys

from milabench.cli.common import add_option, add_system_option, base_path, system_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_system_option(parser)
    add_option(
        parser,
        "base",
        default=None,
        metavar="PATH",
        help="base directory (env MILABENCH_BASE; default ./results)",
    )


def run(args: argparse.Namespace) -> int:
    from milabench.config.system import load_system
    from milabench.errors import UsageError
    from milabench.machine.facts import commit_override
    from milabench.metadata import meta_record, probe_environment

    try:
        commit_override()  # a bad MILABENCH_COMMIT is refused, not recorded as none
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    system = load_system(system_path(args), base=base_path(args))
    record = meta_record(system, probe_environment(sys.executable))
    sys.stdout.write(json.dumps(record, indent=2, default=str) + "\n")
    return 0
