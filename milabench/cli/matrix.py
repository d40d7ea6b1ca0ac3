"""`milabench matrix`: the resolved entries plus the command lines `run` would start.

Same options and output as `milabench resolve`, with, per entry, ``command`` (the argv of
the first process on this machine, placeholders resolved), ``cwd`` (its working
directory: the resolved ``working_dir``) and, for plans that start more
than one process, ``processes`` (tag, command, and the variables that differ between
processes: the device-selection variable and the data channel). Nothing is started.
"""

from __future__ import annotations

import argparse
import sys

from milabench.cli.common import add_format_option, add_suite_options, load_suite_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    add_format_option(parser)


def _process_view(spec, selection: str | None) -> dict:
    env = {}
    if selection and selection in spec.env:
        env[selection] = spec.env[selection]
    if spec.data_channel == "smuggle":
        env["DATA_FD"] = "1"
    return {
        "tag": spec.name,
        "command": list(spec.argv),
        "env": env,
        "data_channel": spec.data_channel,
        **({"node": spec.node.get("name")} if spec.node else {}),
    }


def plan_view(entry, system: dict) -> dict:
    """``command``/``processes`` keys for one entry (``skipped`` when it would not run)."""
    from milabench.errors import MilabenchError
    from milabench.events import redact
    from milabench.execute.suite import unmet_requirement
    from milabench.pack import load_pack
    from milabench.plan.environment import selection_variable

    reason = unmet_requirement(entry, system)
    if reason:
        return {"skipped": reason}
    try:
        specs = load_pack(entry, system).build_run_plan().processes()
    except MilabenchError as err:
        if getattr(err, "is_skip", False):  # e.g. plan.multinode.NotEnoughNodes
            return {"skipped": str(err)}
        raise
    if not specs:
        return {"command": None}
    view: dict = {"command": redact(list(specs[0].argv)), "cwd": specs[0].cwd}
    if len(specs) > 1:
        selection = selection_variable(system.get("arch"))
        view["processes"] = [redact(_process_view(s, selection)) for s in specs]
    return view


def run(args: argparse.Namespace) -> int:
    from milabench.cli.resolve import dump

    suite = load_suite_from_args(args)
    out = {}
    for name, entry in suite.entries.items():
        out[name] = {**entry.as_dict(), **plan_view(entry, suite.system)}
    sys.stdout.write(dump(out, args.format))
    return 0
