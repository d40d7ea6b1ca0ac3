"""Options shared by several commands, declared once and parsed the same way everywhere.

Both spellings are accepted (``--use-current-env`` and ``--use_current_env``).
Environment variables give defaults: MILABENCH_CONFIG, MILABENCH_BASE, MILABENCH_SYSTEM.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

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


def _split_csv(values: list[str] | None) -> list[str]:
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
        help="suite file (env MILABENCH_CONFIG; default: config/cpu.yaml)",
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


def add_validations_option(parser: argparse.ArgumentParser, help: str) -> None:
    add_option(parser, "validations", action="append", default=[], metavar="A,B|all", help=help)


def config_path(args: argparse.Namespace) -> Path:
    value = getattr(args, "config", None) or os.environ.get("MILABENCH_CONFIG")
    return Path(value) if value else DEFAULT_CONFIG


def base_path(args: argparse.Namespace) -> Path:
    value = getattr(args, "base", None) or os.environ.get("MILABENCH_BASE") or DEFAULT_BASE
    return Path(value).expanduser().absolute()


def system_path(args: argparse.Namespace) -> Path | None:
    value = getattr(args, "system", None) or os.environ.get("MILABENCH_SYSTEM")
    return Path(value) if value else None


def load_suite_from_args(args: argparse.Namespace):
    """The resolved, selected suite for these options (see `milabench.config.load_suite`)."""
    from milabench.config import load_suite

    return load_suite(
        config_path(args),
        system=system_path(args),
        base=base_path(args),
        select=_split_csv(getattr(args, "select", None)),
        exclude=_split_csv(getattr(args, "exclude", None)),
        overrides=list(getattr(args, "override", None) or []),
        use_current_env=bool(getattr(args, "use_current_env", False)),
    )
