"""`milabench store`: not built yet (placeholder until its issue lands)."""

from __future__ import annotations

import argparse

from milabench.cli.common import add_suite_options
from milabench.errors import NotAvailableYet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)


def run(args: argparse.Namespace) -> int:
    raise NotAvailableYet("'milabench store' is not available yet in this version")
