"""The fleet folder on the main node and its ``fleet.json``; finding the latest fleet run.

Layout (the contract read by `milabench.fleet.report`)::

    <base>/fleet/<name>/
      fleet.json              every node's status, reason, phase times, environment
      nodes/<node>/           a copy of that node's run folder, as `milabench run` wrote it
      logs/<node>/<phase>.stdout|.stderr   what each phase command printed (diagnosis)

Why ``fleet.json`` is rewritten after every change rather than once at the end: a fleet
run lasts minutes to hours, and whoever watches it (a person, a test, a dashboard) reads
the file meanwhile; an interrupted or killed run must leave a valid document behind. Each
write goes to a temporary file in the same folder, is flushed to disk, then replaces the
old file with ``os.replace`` (atomic on POSIX): a reader sees the old or the new
document, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
KIND = "milabench-fleet"
STATUSES = ("ok", "unreachable", "install-failed", "prepare-failed", "run-failed", "lost")


def fleet_name(now: float | None = None) -> str:
    """``fleet.YYYY-MM-DD_HH-MM-SS`` (local time, like run folders)."""
    return "fleet." + time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now))


def iso_time(now: float | None = None) -> str:
    """``2026-11-23T20:01:02+00:00`` (UTC, seconds)."""
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return moment.replace(microsecond=0).isoformat()


def write_json_atomic(path: Path, document: Any) -> None:
    """Write ``document`` as UTF-8 JSON to ``path`` so that readers never see a partial file."""
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@dataclass
class NodeRecord:
    """One node's entry of ``fleet.json``.

    ``phase`` (where the node is now: ``waiting``, ``reach``, ``code``, ``install``,
    ``prepare``, ``ready``, ``run``, ``collect``, ``done``) is an extra key for whoever
    watches a running fleet; readers of the contract ignore it. ``status`` stays None
    (``null``) until the node is finished: the contract lists final statuses only.
    """

    name: str
    host: str
    status: str | None = None
    reason: str | None = None
    phase: str = "waiting"
    phase_seconds: dict[str, float] = field(default_factory=dict)
    run: str | None = None
    environment: dict | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def finish(self, status: str, reason: str | None = None) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown node status {status!r}")
        self.status = status
        self.reason = reason
        self.phase = "done"

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "host": self.host,
            "status": self.status,
            "reason": self.reason,
            "phase": self.phase,
            "phase_seconds": {k: round(v, 3) for k, v in self.phase_seconds.items()},
            "run": self.run,
            "environment": self.environment,
        }
        out.update(self.extra)
        return out


@dataclass
class FleetFolder:
    """``<base>/fleet/<name>/`` and the document it holds."""

    path: Path
    name: str
    config: str
    select: list[str]
    exclude: list[str]
    nodes: list[NodeRecord]
    started: str = field(default_factory=iso_time)
    ended: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        base: Path,
        *,
        config: str,
        select: list[str],
        exclude: list[str],
        nodes: list[NodeRecord],
        name: str | None = None,
    ) -> FleetFolder:
        """Make a new, empty fleet folder (a second one within the same second gets
        ``.2``, ``.3``... so that nothing is ever written into an older fleet's folder)."""
        parent = base / "fleet"
        parent.mkdir(parents=True, exist_ok=True)
        stem = name or fleet_name()
        chosen, n = stem, 1
        while True:
            try:
                (parent / chosen).mkdir()
                break
            except FileExistsError:
                n += 1
                chosen = f"{stem}.{n}"
        folder = cls(parent / chosen, chosen, config, list(select), list(exclude), nodes)
        (folder.path / "nodes").mkdir()
        folder.write()
        return folder

    @property
    def json_path(self) -> Path:
        return self.path / "fleet.json"

    def node_folder(self, node: str) -> Path:
        return self.path / "nodes" / node

    def log_folder(self, node: str) -> Path:
        folder = self.path / "logs" / node
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def to_dict(self) -> dict:
        out = {
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "name": self.name,
            "config": self.config,
            "select": self.select,
            "exclude": self.exclude,
            "started": self.started,
            "ended": self.ended,
            "nodes": [n.to_dict() for n in self.nodes],
        }
        out.update(self.extra)
        return out

    def write(self) -> None:
        write_json_atomic(self.json_path, self.to_dict())

    def close(self) -> None:
        """Stamp the end time and write the final document."""
        self.ended = iso_time()
        self.write()


# -- finding fleet runs ------------------------------------------------------------------


def is_fleet_run(folder: Path) -> bool:
    return (folder / "fleet.json").is_file()


def fleet_started(folder: Path) -> float:
    """When a fleet run began: fleet.json's `started`, else the file's modification time."""
    path = folder / "fleet.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        started = doc.get("started") if isinstance(doc, dict) else None
        if isinstance(started, str):
            return datetime.fromisoformat(started).timestamp()
    except (OSError, ValueError, UnicodeDecodeError):
        pass
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def fleet_runs(parent: Path) -> list[Path]:
    """The fleet runs directly under `parent`, oldest first."""
    from milabench.report.locate import runs_under

    return runs_under(parent, is_fleet_run, fleet_started)


def find_fleet_run(
    given: Path | None, base: Path, *, say: Callable[[str], None] | None = None
) -> Path:
    """`given` when it is a fleet run; else the latest fleet run under it (or under
    `given/fleet`; without `given`, under `<base>/fleet`), said through `say` (stderr by
    default). No fleet run there is a usage error naming the folder."""
    from milabench.errors import UsageError
    from milabench.report.locate import others, to_stderr

    say = say or to_stderr
    if given is not None:
        if not given.is_dir():
            raise UsageError(f"{given}: no such fleet folder")
        if is_fleet_run(given):
            return given
        candidates = [given, given / "fleet"]
    else:
        candidates = [base / "fleet"]
    for where in candidates:
        runs = fleet_runs(where)
        if runs:
            also = f"; also there: {others(runs[:-1])}" if runs[:-1] else ""
            say(f"fleet report of {runs[-1]} (latest fleet run under {where}{also})")
            return runs[-1]
    raise UsageError(
        f"no fleet run under {candidates[-1]} (start one with `milabench fleet`, or give "
        "a fleet folder holding fleet.json)"
    )
