"""Run the processes of one benchmark concurrently and turn everything into events.

For each `ProcessSpec` the sinks receive, in order: ``config`` (the redacted entry),
``meta``, ``start``, then ``line``/``data``/``format_error``/other instrumentation events
as they arrive, and ``end``. For a local process the runner adds its own ``data`` records
of the process tree's memory (``process_tree``, see `milabench.execute.memory`): about
once a second while the peak grows, every few seconds otherwise, and always one just
before ``end``, and records of what the rest of the host did meanwhile (``interference``:
other processes' CPU time, steal, CPU pressure; `milabench.execute.interference`), one
sampler per benchmark shared by its local processes. Whatever happens (normal exit,
crash, timeout, early stop,
Ctrl-C, an exception in the orchestrator) every process the benchmark started is gone
when `run_specs` returns: see `milabench.execute.cleanup`.

Return codes in ``end``: the process's exit status (negative: killed by that signal),
``"TIMEOUT"`` (stopped after ``max_duration``), ``"INTERRUPTED"`` (Ctrl-C), and 127/126
when the program could not be started.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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

TIMEOUT = RC_TIMEOUT
INTERRUPTED = RC_INTERRUPTED
# Events the orchestrator writes itself; a benchmark may not forge them.
RESERVED_EVENTS = frozenset({"config", "meta", "start", "end", "line", "format_error"})


@dataclass
class Outcome:
    """How one process ended."""

    tag: str
    return_code: int | str
    early_stop: bool = False
    duration: float = 0.0

    @property
    def succeeded(self) -> bool:
        if self.return_code in (TIMEOUT, INTERRUPTED):
            return False
        return self.return_code == 0 or self.early_stop


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
    """Wait for this process's own ``stop``, or for the job's end (see `run_one`)."""
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


async def run_one(
    spec: ProcessSpec,
    sinks: list,
    *,
    launcher: Launcher | None = None,
    stop_event: asyncio.Event | None = None,
    grace: float = 5.0,
    early_stop_grace: float = 2.0,
    interrupt_grace: float = 2.5,
    system: dict | None = None,
    meta: dict | None = None,
    job_stop: asyncio.Event | None = None,
    memory_interval: float | None = memory.INTERVAL,
    interference: InterferenceWatch | None = None,
) -> Outcome:
    """Start one process, stream it, enforce its timeout, clean up, report its end.

    ``memory_interval``: seconds between samples of a local process tree's memory (None:
    no ``process_tree`` records). ``interference``: the benchmark's watch of the rest of
    the host (`milabench.execute.interference`); a local process joins it while it runs.

    ``job_stop`` is shared by the processes of one multi-node job: it is set once the
    process that reported ``stop`` is over (exited or stopped), and the others then get
    the early-stop grace to end on their own before they are stopped too. A worker node
    never sees the event itself and, were its peer gone while it sits in a collective,
    would otherwise wait until its ``max_duration``.
    """
    emit = _Emitter(spec.name, sinks)
    emit("config", redact(spec.entry.as_dict()))
    emit("meta", meta if meta is not None else await _meta(spec, system))
    command = redact(list(spec.argv))
    began = time.time()
    emit("start", {"command": command, "time": began})
    try:
        handle: ProcessHandle = await _launcher_for(spec, launcher).start(spec)
    except (OSError, MilabenchError) as err:
        code = _error_code(err)
        message = (
            str(err) if isinstance(err, FolderError) else f"cannot start {spec.argv[0]}: {err}"
        )
        emit("error", {"type": type(err).__name__, "message": message})
        emit("end", {"command": command, "time": time.time(), "return_code": code})
        return Outcome(spec.name, code, False, time.time() - began)

    sampler, sampling = _start_sampling(handle, emit, memory_interval)
    if interference is not None and isinstance(handle, LocalHandle) and handle.pid is not None:
        tracker = handle.tracker
        interference.add(spec.name, handle.pid, emit, lambda: list(tracker.known.values()))
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

    waiter = asyncio.ensure_future(handle.wait())
    stopped = asyncio.ensure_future(
        channel.stopped.wait() if job_stop is None else _first(channel.stopped, job_stop)
    )
    watched = [waiter, stopped]
    if stop_event is not None:
        watched.append(asyncio.ensure_future(stop_event.wait()))
    return_code: int | str | None = None
    early = False
    stopped_by_us = False
    try:
        timeout = spec.timeout if spec.timeout and spec.timeout > 0 else None
        await asyncio.wait(watched, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if waiter.done():
            return_code = waiter.result()
            # A rank that ends once its job is over (the measuring rank reported `stop` and
            # left) ends with the job's early stop, whatever its code: peers torn down by a
            # departed rank (gloo/NCCL aborts) are not failures of the measurement.
            early = job_stop is not None and job_stop.is_set()
        elif stop_event is not None and stop_event.is_set():
            emit("message", {"message": "interrupted: stopping the benchmark"})
            await handle.stop(min(grace, interrupt_grace))
            return_code, stopped_by_us = INTERRUPTED, True
        elif stopped.done():
            early = True
            remaining = None if timeout is None else max(began + timeout - time.time(), 0.0)
            wait_for = early_stop_grace if remaining is None else min(early_stop_grace, remaining)
            await asyncio.wait(
                [waiter, *watched[2:]], timeout=wait_for, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter.done():
                return_code = waiter.result()
            else:
                emit("message", {"message": "early stop: terminating the remaining processes"})
                await _stop(handle, grace, stop_event, interrupt_grace)
                return_code = waiter.result() if waiter.done() else -9
                stopped_by_us = True
        else:
            emit(
                "message", {"message": f"timeout: still running after {spec.timeout:g} s, stopped"}
            )
            await _stop(handle, grace, stop_event, interrupt_grace)
            return_code, stopped_by_us = TIMEOUT, True
        if not stopped_by_us:
            await handle.cleanup()
    except BaseException as err:
        # Orchestrator error or cancellation: never leave the process behind.
        try:
            await asyncio.shield(handle.stop(min(grace, interrupt_grace)))
        finally:
            for task in pumps:
                task.cancel()
            if sampling is not None:
                sampling.cancel()
            _close(handle)
            if isinstance(err, asyncio.CancelledError):  # a forced interruption: say so
                _final_memory(sampler, emit)
                end = {"command": command, "time": time.time(), "return_code": INTERRUPTED}
                emit("end", end)
        raise
    finally:
        for task in watched:
            task.cancel()
        if sampling is not None:
            sampling.cancel()
        if interference is not None:
            interference.remove(spec.name)
        early = early or channel.stopped.is_set()
        if channel.stopped.is_set() and job_stop is not None:
            job_stop.set()

    interrupted = stop_event is not None and stop_event.is_set()
    drain = DRAIN_TIMEOUT_INTERRUPTED if interrupted else DRAIN_TIMEOUT
    done, pending = await asyncio.wait(pumps, timeout=drain)
    if pending:
        emit("message", {"message": "output still open after the process ended; closed"})
        for task in pending:
            task.cancel()
    _close(handle)
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # a sink failed: as before, the run cannot go on
    end: dict[str, Any] = {"command": command, "time": time.time(), "return_code": return_code}
    if early:
        end["early_stop"] = True
    _final_memory(sampler, emit)
    emit("end", end)
    return Outcome(spec.name, return_code, early, time.time() - began)


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
    """Run ``specs`` concurrently (the processes of one benchmark); outcomes in order.

    ``memory_interval``: see `run_one`; by default the ``run.memory_interval`` option
    (1 s), so that every benchmark's ``.data`` file holds its tree's peak memory.
    """
    if not specs:
        return []
    interval = sampling_interval(system, memory_interval)
    if launcher is None:
        require_launcher(specs)
    # One meta record per benchmark: the machine part is cached, the probe once per venv.
    meta = await _meta(specs[0], system)
    job_stop = asyncio.Event() if _one_job(specs) else None
    watch = InterferenceWatch(interval) if interval is not None else None
    watching = asyncio.ensure_future(watch.run()) if watch is not None else None
    tasks = [
        asyncio.ensure_future(
            run_one(
                spec,
                sinks,
                launcher=launcher,
                stop_event=stop_event,
                grace=grace,
                early_stop_grace=early_stop_grace,
                system=system,
                meta=meta if spec.entry is specs[0].entry else None,
                job_stop=job_stop,
                memory_interval=interval,
                interference=watch,
            )
        )
        for spec in specs
    ]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        if watching is not None:
            watching.cancel()


def run_specs_sync(specs: list[ProcessSpec], sinks: list, **kwargs: Any) -> list[Outcome]:
    """`run_specs` for callers without an event loop (tests, `envs`, prepare).

    Ctrl-C cancels the run (asyncio's own handling: KeyboardInterrupt once every process
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

        async def main() -> list[Outcome]:
            nonlocal task
            task = asyncio.current_task()
            if terminated and task is not None:  # SIGTERM came while the loop started
                task.cancel()
            return await run_specs(specs, sinks, **kwargs)

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
            return runner.run(main())
        except asyncio.CancelledError:
            if terminated:
                raise SystemExit(128 + signal.SIGTERM) from None
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
