"""`milabench resolve`: print the selected entries after include/matrix/inherits/interpolation.

The output is exactly what the planner and the runner receive, which makes it the first
tool to reach for when a suite does not do what its author expected.
"""

from __future__ import annotations

import argparse
import json
import sys

from milabench.cli.common import add_format_option, add_suite_options, load_suite_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    add_format_option(parser)


def dump(data: dict, fmt: str) -> str:
    """`data` as YAML (keys in their order) or indented JSON."""
    if fmt == "json":
        return json.dumps(data, indent=2, default=str) + "\n"
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(
        data, Dumper=dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )


def run(args: argparse.Namespace) -> int:
    suite = load_suite_from_args(args)
    sys.stdout.write(dump({n: e.as_dict() for n, e in suite.entries.items()}, args.format))
    return 0
