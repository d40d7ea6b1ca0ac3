"""Command-line entry point.

Only the chosen command's module is imported: `milabench --help` must print in well
under 0.3 s, so nothing heavy (omegaconf, asyncssh, torch probes) may be imported here.
Each command lives in `milabench/cli/<name>.py` and exposes two functions:

* ``add_arguments(parser)``: declare its options (use `milabench.cli.common` helpers);
* ``run(args) -> int``: do the work, return the process exit code.

User errors are `milabench.errors.MilabenchError`s: printed as one line, no traceback
(unless ``--debug``), exit code from the error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> (module, one-line help). Order is the order shown by --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "install": ("milabench.cli.install", "create or update one environment per install group"),
    "bundle": (
        "milabench.cli.bundle",
        "write a wheelhouse for offline installs (install --offline DIR)",
    ),
    "prepare": ("milabench.cli.prepare", "generate or fetch the data each benchmark needs"),
    "run": ("milabench.cli.run", "run the selected benchmarks and print the report"),
    "report": ("milabench.cli.report", "print or write the report of run folders"),
    "compare": ("milabench.cli.compare", "compare runs, or a run against a baseline"),
    "fleet-report": (
        "milabench.cli.fleet_report",
        "print the report of a fleet run (flags slow or broken nodes)",
    ),
    "list": ("milabench.cli.listing", "list the suite's entries (group, tags, weight, skips)"),
    "dev": ("milabench.cli.dev", "open a shell (or run a command) in a benchmark's environment"),
    "pin": ("milabench.cli.pin", "compile pinned requirements per install group"),
    "resolve": ("milabench.cli.resolve", "print the resolved suite entries"),
    "matrix": ("milabench.cli.matrix", "print the resolved entries with their command lines"),
    "machine": ("milabench.cli.machine", "print the machine metadata record"),
    "doctor": (
        "milabench.cli.doctor",
        "check the machine (throttling, power caps, PCIe, ECC, steal, load): exit 1 on a fail",
    ),
    "preflight": ("milabench.cli.preflight", "check every node before a multi-node run"),
    "fleet": ("milabench.cli.fleet", "run the single-node suite on every node, flag bad ones"),
    "slurm": ("milabench.cli.slurm", "Slurm: `slurm system` (system file), `slurm sbatch` (job)"),
    "store": ("milabench.cli.store", "import runs into the results store, list stored runs"),
    "completion": ("milabench.cli.completion", "print a bash or zsh completion script"),
    "history": (
        "milabench.cli.history",
        "stored results over time: change points, site and alerts, or outliers",
    ),
}


def _find_command(argv: list[str]) -> str | None:
    for token in argv:
        if token == "--":
            return None
        if not token.startswith("-"):
            return token if token in COMMANDS else None
    return None


def build_parser(selected: str | None) -> tuple[argparse.ArgumentParser, object | None]:
    """The top-level parser; only `selected`'s module is imported to declare its options."""
    from milabench import __version__

    parser = argparse.ArgumentParser(
        prog="milabench",
        description="Install, prepare, run and report machine-learning benchmark suites.",
    )
    parser.add_argument("--version", action="version", version=f"milabench {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show Python tracebacks for user errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    module = None
    for name, (modname, helptext) in COMMANDS.items():
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help="show Python tracebacks for user errors",
        )
        if name == selected:
            module = importlib.import_module(modname)
            module.add_arguments(p)
    return parser, module


def _plain_warnings() -> None:
    """Warnings about the user's files read as one line each, like errors do (a Python
    warning would print our source line, which says nothing to a user)."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"milabench: warning: {message}", file=file or sys.stderr)

    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    # Our own modules are installed editable, so pip never compiled them; with
    # PYTHONDONTWRITEBYTECODE set (common in containers) every command would recompile
    # ~0.2 s of source. Writing our own bytecode cache keeps `run`'s fixed cost low.
    sys.dont_write_bytecode = False
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = _find_command(argv)
    parser, module = build_parser(selected)
    args = parser.parse_args(argv)
    if module is None:
        parser.print_help()
        return 0 if not argv or argv in (["-h"], ["--help"]) else 2
    debug = args.debug or os.environ.get("MILABENCH_DEBUG") not in (None, "", "0")
    from milabench.errors import MilabenchError

    if not debug:
        _plain_warnings()

    try:
        return int(module.run(args) or 0)
    except MilabenchError as err:
        if debug:
            raise
        print(f"milabench: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("milabench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
