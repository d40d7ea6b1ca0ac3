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


def add_validations_option(parser: argparse.ArgumentParser, help: str) -> None:
    add_option(parser, "validations", action="append", default=[], metavar="A,B|all", help=help)


def suite_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The suite path the environment gives the CLI (docs/config.md), or None.

    ``MILABENCH_SUITE`` first. ``MILABENCH_CONFIG`` is read as a suite path only when it
    is one: benchmark processes (and `milabench dev` shells) get the JSON of their entry
    under that name (spec phases.md section 3), and a value starting with ``{`` is that
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
        select=_split_csv(getattr(args, "select", None)),
        exclude=_split_csv(getattr(args, "exclude", None)),
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


# -- finding run folders ---------------------------------------------------------------
# `report` and `compare` without run arguments, or given a folder holding runs (the base,
# or `<base>/runs`), use the latest run of benchmarks there and say which on stderr.
# `runs/install.<time>/` and `runs/prepare.<time>/` hold logs of those commands: never picked.
LOG_FOLDER_PHASES = ("install", "prepare")


def has_run_data(folder: Path) -> bool:
    """A run folder: `.data` files, or the report a run that measured nothing still wrote."""
    return any(folder.glob("*.data")) or (folder / "report.json").is_file()


def _is_log_folder(folder: Path) -> bool:
    return folder.name.split(".", 1)[0] in LOG_FOLDER_PHASES


def _start_event_time(path: Path) -> float | None:
    """The `start` event's time, within the first lines of a `.data` file."""
    from milabench.events import decode

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for _, line in zip(range(20), f, strict=False):
                ev = decode(line)
                if ev is not None and ev["event"] == "start":
                    data = ev.get("data")
                    t = data.get("time") if isinstance(data, dict) else None
                    return float(t) if isinstance(t, int | float) else None
    except OSError:
        return None
    return None


def run_start_time(folder: Path) -> float:
    """When a run began: its first `start` event, else its oldest file, else the folder."""
    files = list(folder.glob("*.data"))
    starts = [t for t in (_start_event_time(p) for p in files) if t is not None]
    if starts:
        return min(starts)
    try:
        return min([p.stat().st_mtime for p in files] or [folder.stat().st_mtime])
    except OSError:
        return 0.0


def benchmark_runs(parent: Path) -> list[Path]:
    """The runs of benchmarks directly under `parent`, oldest first."""
    try:
        folders = [p for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []
    runs = [p for p in folders if not _is_log_folder(p) and has_run_data(p)]
    return sorted(runs, key=lambda p: (run_start_time(p), p.name))


def _others(runs: list[Path]) -> str:
    """`a, b, c` (newest first), at most five names."""
    names = [p.name for p in reversed(runs)]
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return ", ".join(names[:5]) + more


def _no_run(where: Path) -> str:
    logs = []
    if where.is_dir():
        logs = sorted(p.name for p in where.iterdir() if p.is_dir() and _is_log_folder(p))
    if logs:
        return (
            f"no run of benchmarks under {where} (only install/prepare logs: "
            f"{', '.join(logs[-3:])}; give one with --runs to report on it)"
        )
    return f"no run under {where} (start one with `milabench run`, or give a run folder)"


def latest_runs(args: argparse.Namespace, count: int, command: str) -> list[Path]:
    """The `count` latest runs under `<base>/runs` (oldest first), said on stderr."""

    from milabench.errors import UsageError

    where = base_path(args) / "runs"
    runs = benchmark_runs(where)
    if not runs:
        raise UsageError(_no_run(where))
    if len(runs) < count:
        raise UsageError(
            f"{command}: only one run under {where} ({runs[0].name}); give two run folders"
        )
    chosen = runs[-count:]
    _announce(command, chosen, where)
    return chosen


def _announce(
    command: str, chosen: list[Path], where: Path, also: str = "", phrase: str | None = None
) -> None:
    """Say on stderr which run(s) a command picked by itself, and from where."""
    import sys

    if len(chosen) == 1:
        what = f"latest run under {where}{also}"
        print(f"milabench: {phrase or command + ' of'} {chosen[0]} ({what})", file=sys.stderr)
    else:
        print(
            f"milabench: {command} {chosen[0]} (A) with {chosen[1]} (B): "
            f"the two latest runs under {where}{also}",
            file=sys.stderr,
        )


def expand_run_folder(
    path: Path, command: str, count: int = 1, *, phrase: str | None = None
) -> list[Path]:
    """A run folder as given; a folder holding runs (`<base>/runs`, or the base): its
    latest `count` runs, said on stderr with the others it did not use. A folder with no
    run data at all is a usage error (exit 2), never an empty report."""

    from milabench.errors import UsageError

    if not path.is_dir():
        raise UsageError(f"{path}: no such run folder")
    if has_run_data(path):
        return [path]
    where, runs = path, benchmark_runs(path)
    if not runs and (path / "runs").is_dir():
        where, runs = path / "runs", benchmark_runs(path / "runs")
    if not runs:
        if not any(path.iterdir()):
            return [path]  # an empty run folder: its report says that nothing was measured
        if where != path or _has_log_folders(path):
            raise UsageError(_no_run(where))
        raise UsageError(f"{path}: no run data (no .data file in it, and no run folder under it)")
    if len(runs) < count:
        raise UsageError(f"{command}: only one run under {where} ({runs[0].name})")
    chosen, rest = runs[-count:], runs[:-count]
    also = f"; also there: {_others(rest)}; pass one of them to choose" if rest else ""
    _announce(command, chosen, where, also, phrase)
    return chosen


def _has_log_folders(path: Path) -> bool:
    return any(p.is_dir() and _is_log_folder(p) for p in path.iterdir())
