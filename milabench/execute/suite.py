"""Running a whole suite: benchmarks one after another, each recorded in the run folder.

Per benchmark (in suite order, ``repeat`` times): a capability that the system lacks is
recorded as a skip (``message`` with ``skipped: "capability"``, ``end`` with return code
``"SKIPPED"``); a missing environment or a plan that cannot be built is recorded as an
``error`` with return code ``"ERROR"``; otherwise its plan's processes run concurrently
(`run_specs`). Nothing a benchmark does stops the suite; only an interruption does.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench.errors import EnvironmentMissing, MilabenchError
from milabench.events import read_events, redact
from milabench.execute.runner import INTERRUPTED, Outcome, run_specs

SKIPPED = "SKIPPED"
ERROR = "ERROR"


@dataclass
class BenchmarkResult:
    """What happened to one benchmark (one repetition)."""

    name: str
    tag: str
    status: str  # ran | skipped | error | resumed | interrupted
    outcomes: list[Outcome] = field(default_factory=list)
    reason: str | None = None

    @property
    def succeeded(self) -> bool:
        if self.status in ("skipped", "resumed"):
            return True
        return self.status == "ran" and all(o.succeeded for o in self.outcomes)


def _emit(sinks: list, tag: str, event: str, data: Any, pipe: str | None = None) -> None:
    record = {"event": event, "data": data, "pipe": pipe}
    for sink in sinks:
        sink.on_event(tag, record)


def record_skip(sinks: list, tag: str, entry: dict, reason: str) -> None:
    """A capability skip: ``config``, ``message`` (with ``skipped``), ``end`` SKIPPED."""
    _emit(sinks, tag, "config", redact(entry))
    _emit(sinks, tag, "message", {"message": reason, "skipped": "capability"})
    _emit(sinks, tag, "end", {"command": None, "time": time.time(), "return_code": SKIPPED})


def record_error(sinks: list, tag: str, entry: dict, err: BaseException) -> None:
    """A benchmark that could not be started at all (missing environment, bad plan)."""
    _emit(sinks, tag, "config", redact(entry))
    _emit(sinks, tag, "error", {"type": type(err).__name__, "message": str(err)})
    _emit(sinks, tag, "end", {"command": None, "time": time.time(), "return_code": ERROR})


def check_environment(entry: dict) -> None:
    """The benchmark's venv must exist unless it runs in the current environment."""
    if entry.get("use_current_env"):
        return
    venv = Path((entry.get("dirs") or {}).get("venv") or "")
    if not (venv / "bin" / "python").exists():
        raise EnvironmentMissing(
            f"{entry.get('name')}: environment {venv} is missing; "
            f"run 'milabench install --select {entry.get('name')}' first"
        )
    from milabench.envs import is_installed

    if not is_installed(venv):
        raise EnvironmentMissing(
            f"{entry.get('name')}: environment {venv} did not finish installing; "
            f"run 'milabench install --select {entry.get('name')}' again"
        )
    refresh_benchkit(venv)


def refresh_benchkit(venv: Path) -> None:
    """The environment's copy of benchkit must be the one this milabench reads back.

    benchkit writes the records (window, rates, stop) that the report interprets; after
    a ``git pull`` without ``milabench install``, a stale copy would measure with old
    rules and the report would misread it. Copying it is a few milliseconds.
    """
    from milabench.envs.helperlib import install_benchkit, site_packages
    from milabench.envs.marker import BENCHKIT_DIR, benchkit_hash

    try:
        copy = site_packages(venv) / "benchkit"
        if copy.is_dir() and benchkit_hash(copy) == _source_benchkit_hash():
            return
        install_benchkit(venv, BENCHKIT_DIR)
    except OSError:
        return  # read-only or unusual environment: the install marker still vouches for it


_SOURCE_HASH: list[str] = []


def _source_benchkit_hash() -> str:
    from milabench.envs.marker import benchkit_hash

    if not _SOURCE_HASH:
        _SOURCE_HASH.append(benchkit_hash())
    return _SOURCE_HASH[0]


def unmet_requirement(entry: dict, system: dict) -> str | None:
    from milabench.config.capabilities import unmet_requirement as check

    return check(entry, system)


def build_specs(entry: dict, system: dict, repeat_index: int | None = None) -> list:
    from milabench.pack import load_pack
    from milabench.plan import with_repeat

    specs = load_pack(entry, system).build_run_plan().processes()
    if repeat_index is not None:
        specs = with_repeat(specs, repeat_index)
    return specs


# -- resume ----------------------------------------------------------------------------
def _file_succeeded(path: Path) -> tuple[str | None, bool]:
    name, ok, ended = None, False, False
    for ev in read_events(path):
        kind, data = ev.get("event"), ev.get("data")
        if kind == "config" and isinstance(data, dict):
            name = data.get("name", name)
        elif kind == "stop":
            ok = True
        elif kind == "end" and isinstance(data, dict):
            ended = True
            ok = ok or data.get("early_stop") is True or data.get("return_code") == 0
    return name, ended and ok


def succeeded_in(run_dir: Path) -> set[str]:
    """Tags stems (``name`` or ``name.R2``) whose every file ended successfully."""
    status: dict[str, bool] = {}
    for path in sorted(Path(run_dir).glob("*.data")):
        name, ok = _file_succeeded(path)
        if not name:
            continue
        stem = path.name[: -len(".data")]
        rest = stem[len(name) + 1 :].split(".") if stem.startswith(name + ".") else []
        key = name
        if rest and rest[0].startswith("R") and rest[0][1:].isdigit():
            key = f"{name}.{rest[0]}"
        status[key] = status.get(key, True) and ok
    return {k for k, ok in status.items() if ok}


def set_aside(run_dir: Path, prefix: str) -> None:
    """Move a failed attempt's files out of the way before running it again."""
    files = [
        p
        for p in Path(run_dir).iterdir()
        if p.is_file()
        and (p.name.startswith(prefix + ".") and p.suffix in (".data", ".stdout", ".stderr"))
    ]
    if not files:
        return
    target = Path(run_dir) / "previous-attempts" / time.strftime("%Y-%m-%d_%H-%M-%S")
    target.mkdir(parents=True, exist_ok=True)
    for p in files:
        shutil.move(str(p), target / p.name)


# -- the suite -----------------------------------------------------------------------------
async def run_suite(
    entries: dict[str, dict],
    system: dict,
    run_dir: Path,
    sinks: list,
    *,
    repeat: int = 1,
    resume: bool = False,
    stop_event: asyncio.Event | None = None,
    grace: float = 5.0,
    early_stop_grace: float = 2.0,
) -> list[BenchmarkResult]:
    """Run every entry in order, ``repeat`` times; returns one result per benchmark run."""
    done = succeeded_in(run_dir) if resume else set()
    results: list[BenchmarkResult] = []
    for k in range(1, repeat + 1):
        for name, entry in entries.items():
            if stop_event is not None and stop_event.is_set():
                return results
            tag = name if repeat == 1 else f"{name}.R{k}"
            if tag in done:
                results.append(BenchmarkResult(name, tag, "resumed", reason="already succeeded"))
                continue
            if resume:
                set_aside(run_dir, tag)
            result = await run_benchmark(
                entry,
                system,
                tag,
                sinks,
                repeat_index=k if repeat > 1 else None,
                stop_event=stop_event,
                grace=grace,
                early_stop_grace=early_stop_grace,
            )
            results.append(result)
    return results


async def run_benchmark(
    entry: dict,
    system: dict,
    tag: str,
    sinks: list,
    *,
    repeat_index: int | None = None,
    stop_event: asyncio.Event | None = None,
    grace: float = 5.0,
    early_stop_grace: float = 2.0,
) -> BenchmarkResult:
    name = str(entry.get("name"))
    reason = unmet_requirement(entry, system)
    if reason:
        record_skip(sinks, tag, entry, reason)
        return BenchmarkResult(name, tag, "skipped", reason=reason)
    try:
        check_environment(entry)
        specs = build_specs(entry, system, repeat_index)
    except MilabenchError as err:
        if getattr(err, "is_skip", False) or type(err).__name__ == "NotEnoughNodes":
            # milabench.remote: the system lacks the nodes the entry needs.
            record_skip(sinks, tag, entry, str(err))
            return BenchmarkResult(name, tag, "skipped", reason=str(err))
        record_error(sinks, tag, entry, err)
        return BenchmarkResult(name, tag, "error", reason=str(err))
    outcomes = await run_specs(
        specs,
        sinks,
        stop_event=stop_event,
        grace=grace,
        early_stop_grace=early_stop_grace,
        system=system,
    )
    interrupted = any(o.return_code == INTERRUPTED for o in outcomes)
    return BenchmarkResult(name, tag, "interrupted" if interrupted else "ran", outcomes)
