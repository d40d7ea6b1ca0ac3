"""`milabench bundle`: write a wheelhouse for air-gapped nodes (`milabench.envs.bundle`).

    milabench bundle --output DIR [--config F] [--select ...] [--variant V]
                     [--python-version 3.11] [--platform x86_64-manylinux_2_28]
                     [--no-milabench | --only-milabench] [--no-inputs | --inputs NAMES]
                     [--verbose]

Run it where the package registries are reachable; copy DIR (and the repository) to the
node, then ``milabench install --offline DIR``. The selected entries' real inputs that
``milabench prepare`` fetched here travel in ``DIR/inputs`` (``--inputs`` picks some,
``--no-inputs`` none; docs/inputs.md) and are placed in the node's data folder by the
offline install. Exit code 0 when the wheelhouse is complete (its ``manifest.json``
written), 1 when a part could not be resolved or downloaded (the line names the package).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from milabench.cli.common import add_option, add_suite_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_suite_options(parser)
    parser.add_argument(
        "--output",
        "-o",
        required=True,
        metavar="DIR",
        help="the wheelhouse folder to write (created; an older wheelhouse there is updated)",
    )
    parser.add_argument(
        "--variant",
        "--arch",
        dest="variant",
        default=None,
        metavar="ARCH",
        help="install variant of every group (requirements.<ARCH>.txt, constraints/<ARCH>.txt;"
        " default: what 'milabench install' would use here)",
    )
    add_option(
        parser,
        "python-version",
        default=None,
        metavar="X.Y",
        help="CPython version of the node (default: this interpreter's)",
    )
    add_option(
        parser,
        "platform",
        default=None,
        metavar="PLATFORM",
        help="platform of the node, in uv's spelling, e.g. x86_64-manylinux_2_28 "
        "(default: this machine's)",
    )
    add_option(
        parser,
        "no-milabench",
        dest="with_milabench",
        action="store_false",
        default=True,
        help="leave out milabench's own dependencies (the node already has milabench)",
    )
    add_option(
        parser,
        "only-milabench",
        action="store_true",
        default=False,
        help="bundle milabench's own dependencies only (for a node whose Python already has "
        "the benchmarks' frameworks: --use-current-env)",
    )
    add_option(
        parser,
        "no-inputs",
        dest="with_inputs",
        action="store_false",
        default=True,
        help="leave the prepared real inputs (data sets, tokenizers, weights) out",
    )
    parser.add_argument(
        "--inputs",
        dest="inputs",
        action="append",
        default=None,
        metavar="NAMES",
        help="carry only these prepared inputs (comma-separated catalogue names; default: "
        "every input of the selected entries prepared here)",
    )
    add_option(
        parser,
        "verbose",
        action="store_true",
        default=False,
        help="print uv's and pip's output as it comes",
    )


def run(args: argparse.Namespace) -> int:
    """Bundle the selection of ``args`` (module docstring); the exit code."""
    from milabench.cli.common import ensure_writable, load_suite_from_args
    from milabench.envs.bundle import Target, make_bundle

    _check_options(args)
    target = Target.parse(args.python_version, args.platform)
    suite = load_suite_from_args(args)
    groups = _groups(args, suite)
    carry_inputs = args.with_inputs and (bool(args.inputs) or not args.only_milabench)
    if not groups and not args.with_milabench and not carry_inputs:
        print("nothing to bundle: no benchmark selected")
        return 0
    runs = suite.base / "runs"
    ensure_writable(suite.base, runs)
    origin = _origin(args, suite)
    carried = _carry_inputs(args, suite, Path(args.output)) if carry_inputs else {}
    results, logs, manifest = make_bundle(
        groups,
        suite.system,
        Path(args.output),
        runs,
        target,
        with_milabench=args.with_milabench,
        origin=origin,
        real_inputs=carried,
        echo=args.verbose,
    )
    return _report(results, logs, manifest, groups, Path(args.output))


def _check_options(args: argparse.Namespace) -> None:
    """A `UsageError` for options that contradict each other."""
    from milabench.errors import UsageError

    if args.only_milabench and not args.with_milabench:
        raise UsageError("--only-milabench and --no-milabench leave nothing to bundle")
    if args.inputs and not args.with_inputs:
        raise UsageError("--inputs and --no-inputs contradict each other")


def _groups(args: argparse.Namespace, suite: Any) -> list[Any]:
    """The install groups to bundle: none with ``--only-milabench``, each entry given
    ``--variant`` when there is one."""
    import dataclasses

    from milabench.envs.groups import build_groups

    entries = [] if args.only_milabench else list(suite.entries.values())
    if args.variant:
        entries = [dataclasses.replace(e, install_variant=args.variant) for e in entries]
    return build_groups(entries, suite.system) if entries else []


def _names(values: list[str] | None) -> list[str]:
    """The names of repeated, comma-separated option values, empty ones dropped."""
    return [n for v in values or [] for n in v.split(",") if n]


def _origin(args: argparse.Namespace, suite: Any) -> dict:
    """What the wheelhouse was made from (suite, selection, variant), for its manifest."""
    return {
        "suite": str(suite.config_path),
        "select": _names(args.select),
        "exclude": _names(args.exclude),
        "variant": args.variant,
    }


def _carry_inputs(args: argparse.Namespace, suite: Any, output: Path) -> dict[str, dict]:
    """Copy the chosen prepared inputs into ``output/inputs`` (`bundle_inputs`); a note
    for each one not prepared here, a `UsageError` for a name not in the catalogue."""
    from benchshared.catalogue import effective_catalogue
    from milabench.envs.bundle import bundle_inputs, data_folders, entry_inputs
    from milabench.errors import UsageError

    selected = list(suite.entries.values())
    wanted = entry_inputs(selected)
    chosen = _names(args.inputs) if args.inputs else wanted
    known = effective_catalogue()  # the site's override file included
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise UsageError(
            f"--inputs: {', '.join(unknown)} not in the catalogue (known: {', '.join(known)})"
        )
    carried, missing = bundle_inputs(output, chosen, data_folders(selected))
    for name in missing:
        print(f"note: input {name} is not prepared here (run 'milabench prepare'): not carried")
    return carried


def _report(
    results: list[Any], logs: Path | None, manifest: dict | None, groups: list[Any], output: Path
) -> int:
    """Print the summary, the log folder and the groups' notes; 1 (and the first failure
    on stderr) when a part failed, else 0."""
    from milabench.envs.bundle import summary

    print(summary(results, manifest, output.absolute()))
    if logs is not None:
        print(f"logs: {logs}")
    for group in groups:
        for note in group.notes:
            print(f"note: {note}")
    failed = [r.name for r in results if not r.ok]
    if failed:
        first = next(r for r in results if not r.ok)
        print(f"milabench: error: bundle {first.name}: {first.message}", file=sys.stderr)
        return 1
    return 0
