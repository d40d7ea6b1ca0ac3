"""Finding run folders: which run a command means when it is given none, or a folder of runs.

`report` and `compare` without run arguments, or given a folder holding runs (the base,
or `<base>/runs`), use the latest run of benchmarks there and say which through `say`
(stderr by default), naming the others they did not use. `runs/install.<time>/` and
`runs/prepare.<time>/` hold logs of those commands: never picked. `runs_under` is the
ordering rule every kind of run shares (the fleet's runs use it too).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

LOG_FOLDER_PHASES = ("install", "prepare")

Say = Callable[[str], None]


def to_stderr(message: str) -> None:
    """The default `say`: one ``milabench: ...`` line on stderr."""
    print(f"milabench: {message}", file=sys.stderr)


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


def runs_under(
    parent: Path, is_run: Callable[[Path], bool], started: Callable[[Path], float]
) -> list[Path]:
    """The folders directly under `parent` that `is_run` accepts, oldest first (by
    `started`, then name); hidden folders and an unreadable parent give none."""
    try:
        folders = [p for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")]
    except OSError:
        return []
    return sorted((p for p in folders if is_run(p)), key=lambda p: (started(p), p.name))


def benchmark_runs(parent: Path) -> list[Path]:
    """The runs of benchmarks directly under `parent`, oldest first."""
    return runs_under(parent, lambda p: not _is_log_folder(p) and has_run_data(p), run_start_time)


def others(runs: list[Path]) -> str:
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
    if where.name == "runs":  # a base's runs: the command that writes there
        from milabench.config.commands import command_line

        start = f"start one with `{command_line('run', base=where.parent)}`"
        return f"no run under {where} ({start}, or give a run folder)"
    return f"no run under {where} (give a run folder, or a base or folder of runs)"


def _announce(
    say: Say, command: str, chosen: list[Path], where: Path, also: str = "",
    phrase: str | None = None,
) -> None:  # fmt: skip
    """Say which run(s) a command picked by itself, and from where."""
    if len(chosen) == 1:
        what = f"latest run under {where}{also}"
        say(f"{phrase or command + ' of'} {chosen[0]} ({what})")
    else:
        say(
            f"{command} {chosen[0]} (A) with {chosen[1]} (B): "
            f"the two latest runs under {where}{also}"
        )


def latest_runs(where: Path, count: int, command: str, *, say: Say = to_stderr) -> list[Path]:
    """The `count` latest runs under `where` (a base's `runs` folder), oldest first, said
    through `say`; none (or too few) is a usage error naming the folder."""
    from milabench.errors import UsageError

    runs = benchmark_runs(where)
    if not runs:
        raise UsageError(_no_run(where))
    if len(runs) < count:
        raise UsageError(
            f"{command}: only one run under {where} ({runs[0].name}); give two run folders"
        )
    chosen = runs[-count:]
    _announce(say, command, chosen, where)
    return chosen


def expand_run_folder(
    path: Path, command: str, count: int = 1, *, phrase: str | None = None, say: Say = to_stderr
) -> list[Path]:
    """A run folder as given; a folder holding runs (`<base>/runs`, or the base): its
    latest `count` runs, said through `say` with the others it did not use. A folder with
    no run data at all is a usage error (exit 2), never an empty report."""
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
    also = f"; also there: {others(rest)}; pass one of them to choose" if rest else ""
    _announce(say, command, chosen, where, also, phrase)
    return chosen


def _has_log_folders(path: Path) -> bool:
    return any(p.is_dir() and _is_log_folder(p) for p in path.iterdir())
