"""Run the processes of one benchmark concurrently and turn everything into events.

Each process is a `ProcessRun` (its spec, the `RunOptions`, the `JobContext` the
benchmark's processes share) whose result is one `Outcome`, tagged with its `Ending`:
exited, early stop, timeout, interrupted, or not started. For each `ProcessSpec` the
sinks receive, in order: ``config`` (the redacted entry), ``meta``, ``start``, then
``line``/``data``/``format_error``/other instrumentation events as they arrive, and
``end``. For a local process the runner adds ``process_tree`` records
(`milabench.execute.memory`) and the ``interference`` records of one sampler per
benchmark (`milabench.execute.interference`). Whatever happens (exit, crash, timeout,
early stop, Ctrl-C, an exception here) every process the benchmark started is gone when
`run_specs` returns (`milabench.execute.cleanup`). The return codes of ``end``:
docs/run-data.md. `run_each` runs independent specs (install checks) side by side, each
as its own `run_specs`, a bounded number at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from benchkit.channel import SmuggleDecoder
from milabench.errors import MilabenchError, NodeError
from milabench.events import RC_INTERRUPTED, RC_TIMEOUT, redact
from milabench.execute import memory
from milabench.execute.interference import InterferenceWatch
from milabench.execute.launcher import (
    FolderError,
    Launcher,
    LocalHandle,
    LocalLauncher,
    ProcessHandle,
)
from milabench.plan.spec import ProcessSpec

T = TypeVar("T")

# Events the orchestrator writes itself; a benchmark may not forge them.
RESERVED_EVENTS = frozenset({"config", "meta", "start", "end", "line", "format_error"})


class Ending(Enum):
    """The way one process of a benchmark ended (see `Outcome`)."""

    EXITED = "exited"
    EARLY_STOP = "early stop"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    NOT_STARTED = "not started"


@dataclass(frozen=True)
class Outcome:
    """How one process ended, as one value; its ``end`` record is made from it.

    * ``EXITED``: it ended by itself; ``exit_code`` is its status (negative: killed by
      that signal).
    * ``EARLY_STOP``: it, or the multi-node job it belongs to, reported ``stop``; then it
      ended by itself or was stopped after the early-stop grace; ``exit_code`` is its
      status once gone (-9 when the stop left it unknown).
    * ``TIMEOUT``: still running after its ``timeout``: stopped (``"TIMEOUT"``).
    * ``INTERRUPTED``: the run was interrupted (Ctrl-C, SIGTERM): stopped
      (``"INTERRUPTED"``).
    * ``NOT_STARTED``: it could not be started; ``exit_code`` 127 (not found), 126 (not
      executable) or 1.

    ``early_stop``: a ``stop`` was reported; always with ``EARLY_STOP``, possibly with
    ``TIMEOUT`` or ``INTERRUPTED`` (it came while the process was being stopped: the
    report then reads the measurement as complete).
    """

    tag: str
    ending: Ending
    exit_code: int | None = None
    early_stop: bool = False
    duration: float = 0.0

    def __post_init__(self) -> None:
        own_code = self.ending in (Ending.EXITED, Ending.EARLY_STOP, Ending.NOT_STARTED)
        if own_code != (self.exit_code is not None):
            need = "needs" if own_code else "has no"
            raise ValueError(f"{self.tag}: an outcome `{self.ending.value}` {need} exit code")
        if self.early_stop is not (self.ending is Ending.EARLY_STOP) and own_code:
            raise ValueError(f"{self.tag}: early_stop={self.early_stop} with `{self.ending.value}`")

    @property
    def return_code(self) -> int | str:
        """The ``return_code`` of the ``end`` record (milabench.events' vocabulary)."""
        if self.ending is Ending.TIMEOUT:
            return RC_TIMEOUT
        if self.ending is Ending.INTERRUPTED:
            return RC_INTERRUPTED
        assert self.exit_code is not None
        return self.exit_code

    @property
    def succeeded(self) -> bool:
        if self.ending in (Ending.TIMEOUT, Ending.INTERRUPTED):
            return False
        return self.exit_code == 0 or self.early_stop

    def end_record(self, command: list[str]) -> dict[str, Any]:
        """The ``end`` event's data."""
        end: dict[str, Any] = {
            "command": command,
            "time": time.time(),
            "return_code": self.return_code,
        }
        if self.early_stop:
            end["early_stop"] = True
        return end


class _Emitter:
    """Fans one process's events out to every sink (in batches when a sink allows it).

    A sink may implement ``on_events(tag, events)`` to receive a whole chunk of events at
    once (one write per chunk instead of one per line); others get ``on_event`` calls.
    """

    __slots__ = ("tag", "sinks", "_batchers")

    def __init__(self, tag: str, sinks: list) -> None:
        self.tag = tag
        self.sinks = sinks
        self._batchers = [getattr(s, "on_events", None) for s in sinks]

    def __call__(self, event: str, data: Any = None, pipe: str | None = None) -> None:
        record = {"event": event, "data": data, "pipe": pipe}
        for sink in self.sinks:
            sink.on_event(self.tag, record)

    def many(self, records: list[dict]) -> None:
        if not records:
            return
        for sink, batch in zip(self.sinks, self._batchers, strict=True):
            if batch is not None:
                batch(self.tag, records)
            else:
                for record in records:
                    sink.on_event(self.tag, record)


def _format_error(line: str, error: str) -> dict:
    return {"event": "format_error", "data": {"line": line, "error": error}, "pipe": "data"}


class _Channel:
    """Decodes data-channel lines into events; notices early stop.

    Hot path (the channel must ingest >100k lines/s): a chunk of lines is parsed with one
    ``json.loads`` of ``[line,line,...]`` when every line looks like one object; any
    doubt (a parse error, a count mismatch) falls back to parsing line by line, which is
    what decides format errors. Records are passed on with their original text under the
    ``_json`` key so the run-file sink can write them without encoding them again.
    """

    def __init__(self, emit: _Emitter) -> None:
        self.emit = emit
        self.stopped = asyncio.Event()

    def feed(self, lines: Iterable[str]) -> None:
        raw_lines = [x for x in lines if x and not x.isspace()]
        if not raw_lines:
            return
        lines = [x.strip() for x in raw_lines]
        parsed = None
        if all(x[0] == "{" and x[-1] == "}" for x in lines):
            try:
                parsed = json.loads("[" + ",".join(lines) + "]")
            except (ValueError, RecursionError):
                parsed = None
            if parsed is not None and len(parsed) != len(lines):
                parsed = None
        if parsed is None:
            parsed = []
            for line in lines:
                try:
                    parsed.append(json.loads(line))
                except ValueError as err:
                    parsed.append(err)
                except RecursionError:  # `[[[[...` deeper than the interpreter allows
                    parsed.append(ValueError("nested too deeply"))
        events: list[dict] = []
        for raw, line, record in zip(raw_lines, lines, parsed, strict=True):
            if isinstance(record, ValueError):
                events.append(_format_error(raw, str(record)))
            elif type(record) is not dict:
                events.append(_format_error(raw, "not a JSON object"))
            elif "$event" in record:
                name = record["$event"]
                if not isinstance(name, str) or name in RESERVED_EVENTS:
                    events.append(_format_error(raw, "invalid event name"))
                    continue
                events.append({"event": name, "data": record.get("$data"), "pipe": "data"})
                if name == "stop":
                    self.stopped.set()
            elif "NaN" in line or "Infinity" in line:
                events.append({"event": "data", "data": record, "pipe": "data"})
            else:
                events.append({"event": "data", "data": record, "pipe": "data", "_json": line})
        self.emit.many(events)


async def _pump_text(batches, emit: _Emitter, pipe: str, decoder=None, channel=None) -> None:
    """Output lines as ``line`` events; smuggled records are taken out into the channel.

    Secrets in the text (``--token X``, ``Authorization: Bearer X``, URL credentials) are
    redacted here, before any sink (run files, terminal, dashboard) sees the line.
    """
    from milabench.events import redact_text

    async for lines in batches:
        events = []
        for line in lines:
            if decoder is not None and "\x1b[" in line:
                plain, records = decoder.feed(line)
                plain += decoder.flush()  # a record never spans two lines
                if records:
                    emit.many(events)
                    events = []
                    channel.feed(records)
                    if not plain.strip():
                        continue
                line = plain
            events.append({"event": "line", "data": redact_text(line), "pipe": pipe})
        emit.many(events)


async def _pump_data(batches, channel: _Channel) -> None:
    async for lines in batches:
        channel.feed(lines)


async def _stop(
    handle: ProcessHandle, grace: float, stop_event: asyncio.Event | None, hurry_grace: float
) -> None:
    """``handle.stop(grace)``, cut short when the run is interrupted meanwhile.

    A timeout or early stop gives the benchmark ``grace`` seconds (5 by default) to
    leave; a Ctrl-C/SIGTERM arriving during that time must not wait for them: a second
    stop with the short interrupt grace is started, and both are awaited (both bounded).
    """
    if stop_event is None or stop_event.is_set():
        grace = grace if stop_event is None else min(grace, hurry_grace)
        await handle.stop(grace)
        return
    stopping = asyncio.ensure_future(handle.stop(grace))
    hurry = asyncio.ensure_future(stop_event.wait())
    try:
        await asyncio.wait([stopping, hurry], return_when=asyncio.FIRST_COMPLETED)
        if not stopping.done():
            await handle.stop(min(grace, hurry_grace))
        await stopping
    finally:
        hurry.cancel()
        if not stopping.done():
            stopping.cancel()


# After the process is over (and its leftovers killed), how long its pipes may take to
# reach end of file before they are closed anyway: only a process that escaped every
# cleanup can hold them that long, and it must not hold the suite.
DRAIN_TIMEOUT = 5.0
DRAIN_TIMEOUT_INTERRUPTED = 1.0


def _launcher_for(spec: ProcessSpec, launcher: Launcher | None) -> Launcher:
    if launcher is not None:
        return launcher
    return LocalLauncher()


def require_launcher(specs: list[ProcessSpec]) -> None:
    """Specs for another node need the launcher the caller injects (`milabench.remote`'s
    node launcher, chosen by the command line); never start them here by mistake."""
    for spec in specs:
        if spec.node is not None and spec.node.get("local") is False:
            raise NodeError(
                f"{spec.name}: node {spec.node.get('name')} is remote and this run has no "
                "remote launcher (pass one to run_specs)"
            )


async def _first(own: asyncio.Event, job: asyncio.Event) -> None:
    """Wait for this process's own ``stop``, or for the job's end (see `JobContext`)."""
    own_wait = asyncio.ensure_future(own.wait())
    job_wait = asyncio.ensure_future(job.wait())
    try:
        await asyncio.wait([own_wait, job_wait], return_when=asyncio.FIRST_COMPLETED)
    finally:
        own_wait.cancel()
        job_wait.cancel()


def _one_job(specs: list[ProcessSpec]) -> bool:
    """Processes on several nodes: one distributed job, stopped as a whole."""
    nodes = {
        (str(s.node.get("name")), str(s.node.get("ip"))) if s.node else ("", "") for s in specs
    }
    return len(specs) > 1 and len(nodes) > 1


def _close(handle: ProcessHandle) -> None:
    """Release the handle's pipes (launchers without ``close`` have nothing to release)."""
    close = getattr(handle, "close", None)
    if close is not None:
        close()


def _error_code(err: BaseException) -> int:
    if isinstance(err, FileNotFoundError):
        return 127
    if isinstance(err, PermissionError):
        return 126
    return 1


# `run_specs` reads the sampling interval from the options (``run.memory_interval``, env
# ``MILABENCH_RUN_MEMORY_INTERVAL``; 0 turns sampling off) unless it is given.
FROM_OPTIONS: Any = object()


def sampling_interval(system: dict | None, given: Any = FROM_OPTIONS) -> float | None:
    """Seconds between two samples of a process tree's memory; None: do not sample."""
    value = given
    if value is FROM_OPTIONS:
        from milabench.config.options import get_option

        value = get_option(system, "run.memory_interval", memory.INTERVAL)
    try:
        seconds = float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        seconds = memory.INTERVAL
    return seconds if seconds > 0 else None


def _start_sampling(
    handle: ProcessHandle, emit: _Emitter, interval: float | None
) -> tuple[memory.TreeSampler | None, asyncio.Future | None]:
    """Watch the memory of a local process tree; remote (SSH) handles are not sampled.

    The launcher's tracker contributes the descendants it saw that have left the tree
    (``setsid`` + a dead parent), so they still count while they live.
    """
    if interval is None or not isinstance(handle, LocalHandle) or handle.pid is None:
        return None, None
    tracker = handle.tracker
    sampler = memory.TreeSampler(handle.pid, lambda: list(tracker.known.values()))
    task = asyncio.ensure_future(
        memory.watch(sampler, lambda record: emit("data", record, "data"), interval=interval)
    )
    return sampler, task


def _final_memory(sampler: memory.TreeSampler | None, emit: _Emitter) -> None:
    """The last ``process_tree`` record, right before ``end``: a report always sees the peak."""
    if sampler is not None:
        emit("data", sampler.record(), "data")


async def _meta(spec: ProcessSpec, system: dict | None) -> dict:
    from milabench.metadata import meta_for_entry

    return await meta_for_entry(spec.entry.python, system)


@dataclass(frozen=True)
class RunOptions:
    """How the processes of a benchmark are given time to leave, and watched.

    ``grace``: after a timeout or an early stop, seconds between SIGTERM and SIGKILL;
    ``early_stop_grace``: once ``stop`` was reported, seconds the process may take to
    exit by itself; ``interrupt_grace``: the (shorter) grace once the run is interrupted;
    ``memory_interval``: seconds between samples of a local process tree's memory (None:
    no ``process_tree`` records).
    """

    grace: float = 5.0
    early_stop_grace: float = 2.0
    interrupt_grace: float = 2.5
    memory_interval: float | None = memory.INTERVAL


@dataclass(frozen=True)
class JobContext:
    """What the processes of one benchmark share.

    ``launcher``: how to start them (None: locally); ``interrupt``: set when the run is
    interrupted (Ctrl-C, SIGTERM); ``job_stop``: shared by the processes of one
    multi-node job, set once the process that reported ``stop`` is over; the others then
    get the early-stop grace to end on their own before they are stopped too (a worker
    node never sees the event itself and, were its peer gone while it sits in a
    collective, would otherwise wait until its ``max_duration``); ``interference``: the
    benchmark's watch of the rest of the host (`milabench.execute.interference`), which a
    local process joins while it runs; ``system``: for the ``meta`` record.
    """

    launcher: Launcher | None = None
    interrupt: asyncio.Event | None = None
    job_stop: asyncio.Event | None = None
    interference: InterferenceWatch | None = None
    system: dict | None = None


@dataclass
class _Attached:
    """What watches one running process (see `ProcessRun._attach`)."""

    sampler: memory.TreeSampler | None
    sampling: asyncio.Future | None
    channel: _Channel
    pumps: list[asyncio.Future]
    exited: asyncio.Future
    stopped: asyncio.Future  # its own ``stop``, or its job's end
    interrupted: asyncio.Future | None

    @property
    def watched(self) -> list[asyncio.Future]:
        return [t for t in (self.exited, self.stopped, self.interrupted) if t is not None]


class ProcessRun:
    """One process of a benchmark: started, streamed, ended one way, cleaned up.

    `run` emits ``config``, ``meta`` (``meta`` given, or probed) and ``start``, starts
    the process, streams its output and data channel into events, waits for the first
    of: its exit, an interruption, a reported ``stop`` (its own or its job's), its
    timeout; acts on it (`_settle`), and returns the `Outcome` after emitting ``end``.

    Whatever happens, once `run` returns or raises: the process group and every
    descendant the launcher tracked are gone (``cleanup`` after an exit, ``stop``
    otherwise, ``stop`` shielded from cancellation on an error), the memory sampler and
    the watchers are cancelled, the process has left the interference watch, its pipes
    are closed, and a cancelled run still records ``end`` (``INTERRUPTED``).
    """

    def __init__(
        self,
        spec: ProcessSpec,
        sinks: list,
        *,
        options: RunOptions = RunOptions(),
        job: JobContext = JobContext(),
        meta: dict | None = None,
    ) -> None:
        self.spec = spec
        self.options = options
        self.job = job
        self.meta = meta
        self.emit = _Emitter(spec.name, sinks)
        self.command = redact(list(spec.argv))
        self.began = 0.0

    def _outcome(self, ending: Ending, code: int | None = None, early: bool = False) -> Outcome:
        return Outcome(self.spec.name, ending, code, early, time.time() - self.began)

    async def run(self) -> Outcome:
        spec, emit, job = self.spec, self.emit, self.job
        emit("config", redact(spec.entry.as_dict()))
        emit("meta", self.meta if self.meta is not None else await _meta(spec, job.system))
        self.began = time.time()
        emit("start", {"command": self.command, "time": self.began})
        try:
            handle: ProcessHandle = await _launcher_for(spec, job.launcher).start(spec)
        except (OSError, MilabenchError) as err:
            return self._not_started(err)

        live = self._attach(handle)
        try:
            ending, code = await self._settle(handle, live)
        except BaseException as err:
            await self._abort(handle, live, err)
            raise
        finally:
            self._detach(live)

        reported = live.channel.stopped.is_set()
        if reported and ending is Ending.EXITED:
            ending = Ending.EARLY_STOP  # it reported `stop`, then left by itself
        await self._drain(handle, live.pumps)
        _final_memory(live.sampler, emit)
        outcome = self._outcome(ending, code, ending is Ending.EARLY_STOP or reported)
        emit("end", outcome.end_record(self.command))
        return outcome

    def _attach(self, handle: ProcessHandle) -> _Attached:
        """Start watching a started process: memory sampling, the interference watch,
        the pumps of its output and data channel, and the waits `_settle` races."""
        spec, emit, job = self.spec, self.emit, self.job
        sampler, sampling = _start_sampling(handle, emit, self.options.memory_interval)
        if (
            job.interference is not None
            and isinstance(handle, LocalHandle)
            and handle.pid is not None
        ):
            tracker = handle.tracker
            job.interference.add(spec.name, handle.pid, emit, lambda: list(tracker.known.values()))
        channel = _Channel(emit)
        smuggle = spec.data_channel == "smuggle"
        pumps = [
            asyncio.ensure_future(
                _pump_text(
                    handle.stdout, emit, "stdout", SmuggleDecoder() if smuggle else None, channel
                )
            ),
            asyncio.ensure_future(_pump_text(handle.stderr, emit, "stderr")),
        ]
        if handle.data is not None:
            pumps.append(asyncio.ensure_future(_pump_data(handle.data, channel)))
        job_stop = job.job_stop
        return _Attached(
            sampler=sampler,
            sampling=sampling,
            channel=channel,
            pumps=pumps,
            exited=asyncio.ensure_future(handle.wait()),
            stopped=asyncio.ensure_future(
                channel.stopped.wait() if job_stop is None else _first(channel.stopped, job_stop)
            ),
            interrupted=(
                asyncio.ensure_future(job.interrupt.wait()) if job.interrupt is not None else None
            ),
        )

    async def _abort(self, handle: ProcessHandle, live: _Attached, err: BaseException) -> None:
        """Orchestrator error or cancellation: never leave the process behind; a
        cancelled run still says how it ended."""
        try:
            await asyncio.shield(handle.stop(self._interrupt_grace()))
        finally:
            for task in live.pumps:
                task.cancel()
            if live.sampling is not None:
                live.sampling.cancel()
            _close(handle)
            if isinstance(err, asyncio.CancelledError):
                _final_memory(live.sampler, self.emit)
                self.emit("end", self._outcome(Ending.INTERRUPTED).end_record(self.command))

    def _detach(self, live: _Attached) -> None:
        """The process is over (or abandoned): stop watching it; a reported ``stop``
        ends the job of the other nodes."""
        for task in live.watched:
            task.cancel()
        if live.sampling is not None:
            live.sampling.cancel()
        if self.job.interference is not None:
            self.job.interference.remove(self.spec.name)
        if live.channel.stopped.is_set() and self.job.job_stop is not None:
            self.job.job_stop.set()

    def _not_started(self, err: OSError | MilabenchError) -> Outcome:
        """The launcher could not start the process: an ``error`` event, then ``end``."""
        argv0 = self.spec.argv[0]
        message = str(err) if isinstance(err, FolderError) else f"cannot start {argv0}: {err}"
        self.emit("error", {"type": type(err).__name__, "message": message})
        outcome = self._outcome(Ending.NOT_STARTED, _error_code(err))
        self.emit("end", outcome.end_record(self.command))
        return outcome

    def _interrupt_grace(self) -> float:
        return min(self.options.grace, self.options.interrupt_grace)

    async def _settle(self, handle: ProcessHandle, live: _Attached) -> tuple[Ending, int | None]:
        """Wait for the first thing that ends the process and act on it: (ending, its
        exit status when it is the process's own).

        An exit is followed by the cleanup of what the process left behind; the other
        ways end with the process group stopped (SIGTERM, then SIGKILL after the grace).
        """
        spec, opts, job, emit = self.spec, self.options, self.job, self.emit
        waiter, stopped, interrupt = live.exited, live.stopped, live.interrupted
        timeout = spec.timeout if spec.timeout and spec.timeout > 0 else None
        await asyncio.wait(live.watched, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if waiter.done():
            # A rank that ends once its job is over (the measuring rank reported `stop`
            # and left) ends with the job's early stop, whatever its code: peers torn down
            # by a departed rank (gloo/NCCL aborts) are not failures of the measurement.
            job_over = job.job_stop is not None and job.job_stop.is_set()
            await handle.cleanup()
            return (Ending.EARLY_STOP if job_over else Ending.EXITED), waiter.result()
        if interrupt is not None and interrupt.done():
            emit("message", {"message": "interrupted: stopping the benchmark"})
            await handle.stop(self._interrupt_grace())
            return Ending.INTERRUPTED, None
        if stopped.done():
            remaining = None if timeout is None else max(self.began + timeout - time.time(), 0.0)
            grace = (
                opts.early_stop_grace
                if remaining is None
                else min(opts.early_stop_grace, remaining)
            )
            others = [waiter] if interrupt is None else [waiter, interrupt]
            await asyncio.wait(others, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                await handle.cleanup()
                return Ending.EARLY_STOP, waiter.result()
            emit("message", {"message": "early stop: terminating the remaining processes"})
            await _stop(handle, opts.grace, job.interrupt, opts.interrupt_grace)
            return Ending.EARLY_STOP, waiter.result() if waiter.done() else -9
        emit("message", {"message": f"timeout: still running after {spec.timeout:g} s, stopped"})
        await _stop(handle, opts.grace, job.interrupt, opts.interrupt_grace)
        return Ending.TIMEOUT, None

    async def _drain(self, handle: ProcessHandle, pumps: list[asyncio.Future]) -> None:
        """Let the output reach end of file (bounded: a process that escaped every
        cleanup may hold the pipes), close the pipes, and re-raise a sink's failure."""
        interrupted = self.job.interrupt is not None and self.job.interrupt.is_set()
        drain = DRAIN_TIMEOUT_INTERRUPTED if interrupted else DRAIN_TIMEOUT
        done, pending = await asyncio.wait(pumps, timeout=drain)
        if pending:
            self.emit("message", {"message": "output still open after the process ended; closed"})
            for task in pending:
                task.cancel()
        _close(handle)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # a sink failed: the run cannot go on


async def run_specs(
    specs: list[ProcessSpec],
    sinks: list,
    *,
    launcher: Launcher | None = None,
    stop_event: asyncio.Event | None = None,
    grace: float = 5.0,
    early_stop_grace: float = 2.0,
    system: dict | None = None,
    memory_interval: Any = FROM_OPTIONS,
) -> list[Outcome]:
    """Run ``specs`` concurrently (the processes of one benchmark, one `ProcessRun`
    each); outcomes in order. ``stop_event``: the run's interruption.

    ``grace``, ``early_stop_grace``: see `RunOptions`. ``memory_interval``: by default
    the ``run.memory_interval`` option (1 s), so that every benchmark's ``.data`` file
    holds its tree's peak memory.
    """
    if not specs:
        return []
    interval = sampling_interval(system, memory_interval)
    if launcher is None:
        require_launcher(specs)
    # One meta record per benchmark: the machine part is cached, the probe once per venv.
    meta = await _meta(specs[0], system)
    watch = InterferenceWatch(interval) if interval is not None else None
    watching = asyncio.ensure_future(watch.run()) if watch is not None else None
    options = RunOptions(grace=grace, early_stop_grace=early_stop_grace, memory_interval=interval)
    job = JobContext(
        launcher=launcher,
        interrupt=stop_event,
        job_stop=asyncio.Event() if _one_job(specs) else None,
        interference=watch,
        system=system,
    )
    runs = [
        ProcessRun(
            spec,
            sinks,
            options=options,
            job=job,
            meta=meta if spec.entry is specs[0].entry else None,
        )
        for spec in specs
    ]
    try:
        return await gather_or_cancel([asyncio.ensure_future(run.run()) for run in runs])
    finally:
        if watching is not None:
            watching.cancel()


async def gather_or_cancel(tasks: list[asyncio.Future]) -> list:
    """The results of ``tasks`` in their order; when one fails or the wait is cancelled,
    every task still going is cancelled and awaited before the error is raised."""
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def run_each(
    specs: list[ProcessSpec], sinks: list[list], *, limit: int, **kwargs: Any
) -> list[Outcome]:
    """Run independent ``specs`` (not one benchmark: each is its own `run_specs`, fed
    its own list of ``sinks``, same index), at most ``limit`` at a time; outcomes in the
    order of ``specs``. ``kwargs``: those of `run_specs`. A failure or cancellation
    stops every run still going (each still records its ``end``) and is raised."""
    gate = asyncio.Semaphore(max(1, limit))

    async def one(spec: ProcessSpec, own: list) -> Outcome:
        async with gate:
            (outcome,) = await run_specs([spec], own, **kwargs)
            return outcome

    return await gather_or_cancel(
        [asyncio.ensure_future(one(s, o)) for s, o in zip(specs, sinks, strict=True)]
    )


def run_specs_sync(specs: list[ProcessSpec], sinks: list, **kwargs: Any) -> list[Outcome]:
    """`run_specs` for callers without an event loop (tests, `envs`, prepare); Ctrl-C
    and SIGTERM as `run_sync` says."""
    return run_sync(lambda: run_specs(specs, sinks, **kwargs))


def run_each_sync(
    specs: list[ProcessSpec], sinks: list[list], *, limit: int, **kwargs: Any
) -> list[Outcome]:
    """`run_each` for callers without an event loop (`envs`' concurrent checks)."""
    return run_sync(lambda: run_each(specs, sinks, limit=limit, **kwargs))


def run_sync(main: Callable[[], Awaitable[T]]) -> T:
    """Run the coroutine ``main()`` makes in a fresh event loop and return its result.

    Ctrl-C cancels it (asyncio's own handling: KeyboardInterrupt once every process
    is stopped). SIGTERM gets the same treatment, ending in ``SystemExit(143)``: its
    default action would kill only us, and leave the command's processes (each in a
    session of its own) running. A second SIGTERM kills them and exits at once.
    """
    import signal
    import threading

    terminated = 0
    task: asyncio.Task | None = None

    with asyncio.Runner() as runner:
        loop = runner.get_loop()

        async def wrapped() -> T:
            nonlocal task
            task = asyncio.current_task()
            if terminated and task is not None:  # SIGTERM came while the loop started
                task.cancel()
            return await main()

        def on_sigterm(signum: int, frame: Any) -> None:
            nonlocal terminated
            terminated += 1
            if terminated > 1:
                from milabench.execute.launcher import kill_all_now

                kill_all_now()
                os._exit(128 + signum)
            if task is not None:
                loop.call_soon_threadsafe(task.cancel)

        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, on_sigterm)
        try:
            return runner.run(wrapped())
        except asyncio.CancelledError:
            if terminated:
                raise SystemExit(128 + signal.SIGTERM) from None
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
