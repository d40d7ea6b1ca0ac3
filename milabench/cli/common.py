"""Options shared by several commands, declared once and parsed the same way everywhere.

Both spellings are accepted (``--use-current-env`` and ``--use_current_env``).
Environment variables give defaults: MILABENCH_SUITE (or, for upstream compatibility,
MILABENCH_CONFIG when it holds a path: `suite_from_env`), MILABENCH_BASE, MILABENCH_SYSTEM.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from milabench.formats import Renderers

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "config" / "cpu.yaml"
DEFAULT_BASE = "results"


def _both(name: str) -> list[str]:
    """``--run-name`` and ``--run_name``: both spellings of one option."""
    dashed = "--" + name.replace("_", "-")
    underscored = "--" + name.replace("-", "_")
    return [dashed] if dashed == underscored else [dashed, underscored]


def add_option(parser: argparse.ArgumentParser, name: str, **kwargs) -> None:
    """Declare an option under both spellings, stored under the underscore name."""
    kwargs.setdefault("dest", name.replace("-", "_"))
    parser.add_argument(*_both(name), **kwargs)


def split_csv(values: list[str] | None) -> list[str]:
    """Repeated ``--select a,b --select c`` values as one list of names."""
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def add_suite_options(parser: argparse.ArgumentParser, *, selection: bool = True) -> None:
    """--config --base --system [--select --exclude] --override --use-current-env."""
    add_option(
        parser,
        "config",
        default=None,
        metavar="PATH",
        help="suite file (env MILABENCH_SUITE, or MILABENCH_CONFIG when it is a path;"
        " default: config/cpu.yaml)",
    )
    add_option(
        parser,
        "base",
        default=None,
        metavar="PATH",
        help="base directory for venvs, data, runs (env MILABENCH_BASE; default ./results)",
    )
    add_system_option(parser)
    if selection:
        add_option(
            parser,
            "select",
            action="append",
            default=[],
            metavar="A,B",
            help="keep benchmarks whose name, group, tag or folder matches",
        )
        add_option(
            parser,
            "exclude",
            action="append",
            default=[],
            metavar="A,B",
            help="remove benchmarks whose name, group, tag or folder matches",
        )
    add_option(
        parser,
        "override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="OmegaConf dotlist override applied last (repeatable)",
    )
    add_option(
        parser,
        "use-current-env",
        action="store_true",
        default=False,
        help="use the active environment instead of one environment per group",
    )
    add_option(
        parser,
        "strict",
        action="store_true",
        default=False,
        help="an unknown key in an entry is an error (exit 2), not a warning"
        " (env MILABENCH_STRICT=1)",
    )


def add_system_option(parser: argparse.ArgumentParser) -> None:
    add_option(
        parser,
        "system",
        default=None,
        metavar="PATH",
        help="system file with nodes and options (env MILABENCH_SYSTEM)",
    )


def add_format_option(parser: argparse.ArgumentParser) -> None:
    """--format yaml|json, for the commands that print the resolved suite."""
    add_option(
        parser,
        "format",
        choices=("yaml", "json"),
        default="yaml",
        help="output format (default: yaml)",
    )


def add_render_options(
    parser: argparse.ArgumentParser,
    renderers: Renderers,
    *,
    format_help: str | None = None,
    output_help: str | None = None,
) -> None:
    """--format (the choices: every name of `renderers`, default text) and, when
    `output_help` is given, --output FILE (written by `write_rendered`): the options of
    the commands that print a report (report, compare, fleet-report, history)."""
    add_option(parser, "format", default="text", choices=renderers.names, help=format_help)
    if output_help is not None:
        add_option(parser, "output", default=None, metavar="FILE", help=output_help)


def add_validations_option(parser: argparse.ArgumentParser, help: str) -> None:
    add_option(parser, "validations", action="append", default=[], metavar="A,B|all", help=help)


def suite_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The suite path the environment gives the CLI (docs/config.md), or None.

    ``MILABENCH_SUITE`` first. ``MILABENCH_CONFIG`` is read as a suite path only when it
    is one: benchmark processes (and `milabench dev` shells) get the JSON of their entry
    under that name (docs/phases.md section 4), and a value starting with ``{`` is that
    JSON, never a file name.
    """
    environ = os.environ if environ is None else environ
    suite = environ.get("MILABENCH_SUITE", "").strip()
    if suite:
        return suite
    config = environ.get("MILABENCH_CONFIG", "").strip()
    if config and not config.startswith("{"):
        return config
    return None


def given_config(args: argparse.Namespace) -> Path | None:
    """--config, else the environment's suite, else None (`report`/`compare` need none)."""
    value = getattr(args, "config", None) or suite_from_env()
    return Path(value) if value else None


def config_path(args: argparse.Namespace) -> Path:
    value = getattr(args, "config", None) or suite_from_env()
    return Path(value) if value else DEFAULT_CONFIG


def base_path(args: argparse.Namespace) -> Path:
    value = getattr(args, "base", None) or os.environ.get("MILABENCH_BASE") or DEFAULT_BASE
    return Path(value).expanduser().absolute()


def ensure_writable(base: Path, folder: Path) -> None:
    """Create `folder` (under the base) and check a file can be written there, so that an
    unwritable ``--base`` is one line naming it rather than a traceback from deep inside
    a run."""
    import tempfile

    from milabench.errors import UsageError

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        try:
            shown = folder.relative_to(base)
        except ValueError:
            shown = folder
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"--base {base}: cannot create {shown}: {reason}") from None


def system_path(args: argparse.Namespace) -> Path | None:
    value = getattr(args, "system", None) or os.environ.get("MILABENCH_SYSTEM")
    return Path(value) if value else None


def load_suite_from_args(args: argparse.Namespace):
    """The resolved, selected suite for these options (see `milabench.config.load_suite`),
    its plan methods checked against the plan layer's table."""
    from milabench.config import load_suite
    from milabench.plan import check_methods

    suite = load_suite(
        config_path(args),
        system=system_path(args),
        base=base_path(args),
        select=split_csv(getattr(args, "select", None)),
        exclude=split_csv(getattr(args, "exclude", None)),
        overrides=list(getattr(args, "override", None) or []),
        use_current_env=bool(getattr(args, "use_current_env", False)),
        strict=strict_mode(args),
    )
    check_methods(suite.all_entries.values())
    return suite


def strict_mode(args: argparse.Namespace) -> bool:
    """``--strict``, or ``MILABENCH_STRICT`` set to a true value."""
    if getattr(args, "strict", False):
        return True
    return os.environ.get("MILABENCH_STRICT", "").strip().lower() in ("1", "true", "yes", "on")


def write_output(path: Path, text: str, what: str) -> None:
    """Write `what` (a report, a comparison) to `path` for ``--output``, creating missing
    parent folders, and say so on stderr; a path that cannot be written is one line
    naming it."""
    import sys

    from milabench.errors import UsageError

    if path.parent.exists() and not path.parent.is_dir():
        raise UsageError(f"--output {path}: {path.parent} is not a folder")
    try:
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
            print(f"created folder {path.parent} for --output", file=sys.stderr)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"--output {path}: cannot write: {reason}") from None
    print(f"{what} written to {path}", file=sys.stderr)


def write_rendered(text: str, output: str | None, what: str) -> None:
    """A rendering where --output says: the file (`write_output`, which names `what` on
    stderr), else standard output as it is."""
    import sys

    if output:
        write_output(Path(output), text, what)
    else:
        sys.stdout.write(text)


def add_requirements_option(parser: argparse.ArgumentParser) -> None:
    """--ignore-requirements: use a suite on a machine that lacks what its `_requires`
    names (the GPU suite on a CPU); without it, `check_requirements` refuses."""
    add_option(
        parser,
        "ignore-requirements",
        action="store_true",
        default=False,
        help="go on when this machine lacks what the suite requires (its `_requires`: "
        "the GPU suite on a machine without a GPU); otherwise refused in one line",
    )


def suite_command(
    args: argparse.Namespace,
    verb: str | None = None,
    *,
    config: Path | None = None,
    selection: bool = True,
    extra: tuple[str, ...] = (),
) -> str:
    """The command line of `args` (its command unless `verb`), whole: ``--config`` (the
    one it used unless `config`), ``--base`` and ``--system`` when not the defaults, and
    with `selection` its ``--select``, ``--exclude`` and ``--override``, and
    ``--use-current-env``: a hint that works when pasted (`milabench.config.commands`)."""
    from milabench.config.commands import command_line

    return command_line(
        verb or getattr(args, "command", None) or "run",
        config=config or config_path(args),
        base=base_path(args),
        system=system_path(args),
        select=split_csv(getattr(args, "select", None)) if selection else (),
        exclude=split_csv(getattr(args, "exclude", None)) if selection else (),
        overrides=list(getattr(args, "override", None) or []) if selection else (),
        use_current_env=bool(getattr(args, "use_current_env", False)),
        extra=extra,
    )


def check_requirements(suite, args: argparse.Namespace, *, refuse: bool = True) -> list:
    """What the suite needs of the machine (its `_requires`), said once, in one line,
    before anything is installed, prepared or started.

    Every requirement holds: nothing is said, ``[]``. One does not: with `refuse`
    (install, prepare, run) a `UsageError` naming what the machine lacks, the suite made
    for it as a command to paste (this command with ``--config`` changed, the selection
    kept when that suite has it) and ``--ignore-requirements``; without `refuse` (list)
    the same line as a note on stderr. With ``--ignore-requirements`` a warning, and the
    command goes on. Returns the unmet requirements."""
    import sys

    from milabench.config.capabilities import requirement_line, unmet_suite_requirements
    from milabench.config.commands import shown_path
    from milabench.errors import UsageError

    unmet = unmet_suite_requirements(getattr(suite, "requires", ()), suite.system)
    if not unmet:
        return []
    shown = shown_path(suite.config_path)
    line = requirement_line(shown, unmet, suite.system)
    instead = next((req.instead for req in unmet if req.instead is not None), None)
    if instead is not None:
        line += (
            f"; the suite made for this machine is {shown_path(instead)}: "
            f"`{instead_command(args, instead)}`"
        )
    if getattr(args, "ignore_requirements", False):
        print(f"milabench: warning: {line}; going on (--ignore-requirements)", file=sys.stderr)
        return unmet
    if refuse:
        raise UsageError(f"{line} (or add --ignore-requirements to use {shown} here anyway)")
    print(
        f"milabench: note: {line}; install, prepare and run refuse {shown} here",
        file=sys.stderr,
    )
    return unmet


def instead_command(args: argparse.Namespace, instead: Path) -> str:
    """This command on the suite `instead`, keeping the selection when that suite loads
    with it (a name it lacks would make the pasted command fail), else without it."""
    import warnings

    from milabench.config import load_suite
    from milabench.errors import MilabenchError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the command itself will say them
            load_suite(
                instead,
                system=system_path(args),
                base=base_path(args),
                select=split_csv(getattr(args, "select", None)),
                exclude=split_csv(getattr(args, "exclude", None)),
                overrides=list(getattr(args, "override", None) or []),
            )
    except MilabenchError:
        return suite_command(args, config=instead, selection=False)
    return suite_command(args, config=instead)
