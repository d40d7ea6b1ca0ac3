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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench.config.entry import Entry, as_entry
from milabench.errors import MilabenchError
from milabench.events import RC_ERROR, RC_SKIPPED, redact
from milabench.execute.launcher import Launcher
from milabench.execute.runner import Ending, Outcome, require_launcher, run_specs

SKIPPED = RC_SKIPPED
ERROR = RC_ERROR


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


def record_skip(sinks: list, tag: str, entry: Entry | Mapping[str, Any], reason: str) -> None:
    """A capability skip: ``config``, ``message`` (with ``skipped``), ``end`` SKIPPED."""
    _emit(sinks, tag, "config", redact(as_entry(entry).as_dict()))
    _emit(sinks, tag, "message", {"message": reason, "skipped": "capability"})
    _emit(sinks, tag, "end", {"command": None, "time": time.time(), "return_code": SKIPPED})


def record_error(
    sinks: list, tag: str, entry: Entry | Mapping[str, Any], err: BaseException
) -> None:
    """A benchmark that could not be started at all (missing environment, bad plan)."""
    _emit(sinks, tag, "config", redact(as_entry(entry).as_dict()))
    _emit(sinks, tag, "error", {"type": type(err).__name__, "message": str(err)})
    _emit(sinks, tag, "end", {"command": None, "time": time.time(), "return_code": ERROR})


def unmet_requirement(entry: Entry, system: dict) -> str | None:
    from milabench.config.capabilities import unmet_requirement as check

    return check(entry, system)


# Called before a benchmark starts; raises a `MilabenchError` (recorded as the entry's
# error) when its environment cannot run it. The command line passes
# `milabench.envs.ensure_ready`; the executor itself knows nothing of environments.
EnvironmentCheck = Callable[[Entry], None]


def build_specs(entry: Entry, system: dict, repeat_index: int | None = None) -> list:
    from milabench.pack import load_pack
    from milabench.plan import with_repeat

    specs = load_pack(entry, system).build_run_plan().processes()
    if repeat_index is not None:
        specs = with_repeat(specs, repeat_index)
    return specs


# -- resume ----------------------------------------------------------------------------
def succeeded_in(run_dir: Path) -> set[str]:
    """Tag stems (``name`` or ``name.R2``) whose every file is a success.

    Success is the report's rule (`rundata.outcome.file_status`), never re-derived here:
    a file that `milabench report` calls failed (a NaN loss, an error event, too few
    observations) is run again by ``--resume``.
    """
    from milabench.rundata.outcome import SUCCESS, file_status
    from milabench.rundata.reader import read_run_dir

    files = read_run_dir(run_dir)
    with_rates = {fr.group_key for fr in files if fr.rates}
    status: dict[str, bool] = {}
    for fr in files:
        if not fr.entry.name:
            continue
        key = fr.name if fr.repeat is None else f"{fr.name}.R{fr.repeat}"
        ok = file_status(fr, fr.group_key in with_rates) == SUCCESS
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
    entries: dict[str, Entry],
    system: dict,
    run_dir: Path,
    sinks: list,
    *,
    repeat: int = 1,
    resume: bool = False,
    stop_event: asyncio.Event | None = None,
    grace: float = 5.0,
    early_stop_grace: float = 2.0,
    launcher: Launcher | None = None,
    check_environment: EnvironmentCheck | None = None,
) -> list[BenchmarkResult]:
    """Run every entry in order, ``repeat`` times; returns one result per benchmark run.

    `launcher` starts processes on other nodes (None: this machine only); the
    `check_environment` hook vets each entry's environment before it starts.
    """
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
                launcher=launcher,
                check_environment=check_environment,
            )
            results.append(result)
    return results


async def run_benchmark(
    entry: Entry | Mapping[str, Any],
    system: dict,
    tag: str,
    sinks: list,
    *,
    repeat_index: int | None = None,
    stop_event: asyncio.Event | None = None,
    grace: float = 5.0,
    early_stop_grace: float = 2.0,
    launcher: Launcher | None = None,
    check_environment: EnvironmentCheck | None = None,
) -> BenchmarkResult:
    entry = as_entry(entry)
    name = entry.name
    reason = unmet_requirement(entry, system)
    if reason:
        record_skip(sinks, tag, entry, reason)
        return BenchmarkResult(name, tag, "skipped", reason=reason)
    try:
        if check_environment is not None:
            check_environment(entry)
        specs = build_specs(entry, system, repeat_index)
        if launcher is None:
            require_launcher(specs)
    except MilabenchError as err:
        if getattr(err, "is_skip", False):
            # plan.multinode.NotEnoughNodes: the system lacks the nodes the entry needs.
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
        launcher=launcher,
    )
    interrupted = any(o.ending is Ending.INTERRUPTED for o in outcomes)
    return BenchmarkResult(name, tag, "interrupted" if interrupted else "ran", outcomes)
