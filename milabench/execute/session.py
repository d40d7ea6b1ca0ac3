"""One `milabench run` invocation: sinks, signals, the suite, then the caller's report.

Kept out of the command module so that it can be driven from tests and scripts. The
executor knows nothing of reports: the caller passes what judges the run folder at the
end (`report=`; `milabench run` passes `milabench.report.run_end.print_run_report`).
Ctrl-C (SIGINT) and SIGTERM set a stop event: running benchmarks are stopped (same path
as a timeout, with a short grace) and recorded as INTERRUPTED, the partial report is
printed and the exit code is 130 (143 for SIGTERM).

A signal must end the run even if something in it is stuck (see `_Interrupts`): the
run is cancelled if it has not ended `CANCEL_AFTER` seconds after the first signal (or
at once on a second one), and a watchdog thread, which needs nothing from the event
loop, kills every benchmark process and exits `HARD_EXIT_AFTER` seconds after it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from milabench.execute.launcher import Launcher, kill_all_now
from milabench.execute.suite import BenchmarkResult, EnvironmentCheck, run_suite
from milabench.sinks import make_console_sink
from milabench.sinks.runfiles import RunFileSink

EXIT_INTERRUPTED = 130

# Called once the run is over and the sinks are closed, with the run folder and the
# output stream: prints the run's report and returns the exit code of its verdict.
ReportCallback = Callable[[Path, IO[str]], int]


def _option(system: dict, name: str, default: float) -> float:
    from milabench.config.options import get_option

    value = get_option(system, name, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


CANCEL_AFTER = 8.0  # seconds after the first signal: cancel the run (it should be over)
HARD_EXIT_AFTER = 15.0  # seconds after the first signal: kill everything and exit
REMOTE_CLOSE_TIMEOUT = 10.0


class _Interrupts:
    """SIGINT/SIGTERM handling that always ends the run, stuck or not.

    Handlers are plain `signal.signal` handlers rather than the loop's: they run in the
    main thread even while the loop is blocked (a stuck write, a lock), and talk to the
    loop only through ``call_soon_threadsafe``. First signal: the stop event (the
    orderly path: benchmarks stopped with a short grace, INTERRUPTED, partial report).
    Then escalation, by time (`CANCEL_AFTER`) or by a second signal: the run's task is
    cancelled (every process is still stopped on the way out). Last, by time
    (`HARD_EXIT_AFTER`) or a third signal, a watchdog thread started up front (starting
    a thread inside a handler could deadlock) SIGKILLs the benchmark processes and
    calls ``os._exit``.
    """

    def __init__(self) -> None:
        self.signum = 0
        self.count = 0
        self.first_at: float | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_event: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        self.cancelled = False
        self._previous: dict[int, object] = {}
        self._done = threading.Event()
        self._watchdog = threading.Thread(
            target=self._watch, name="milabench-watchdog", daemon=True
        )

    def install(self) -> bool:
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handler)
        except ValueError:  # not the main thread: leave signals alone
            self.uninstall()
            return False
        self._watchdog.start()
        return True

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()
        self._done.set()

    def attach(self, loop: asyncio.AbstractEventLoop, stop_event: asyncio.Event, task) -> None:
        self.loop, self.stop_event, self.task = loop, stop_event, task
        if self.count:  # a signal came before the loop was ready
            loop.call_soon(stop_event.set)

    def detach(self) -> None:
        self.loop = self.stop_event = self.task = None

    def _handler(self, signum: int, frame) -> None:
        self.count += 1
        if self.count == 1:
            self.signum = signum
            self.first_at = time.monotonic()
            self._to_loop(self._stop)
        elif self.count == 2:
            self._to_loop(self._cancel)
        else:
            self._hard_exit()

    def _to_loop(self, callback) -> None:
        loop = self.loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop is closed: the run is over
            pass

    def _stop(self) -> None:
        if self.stop_event is not None:
            self.stop_event.set()

    def _cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.cancelled = True
            self.task.cancel()

    def _watch(self) -> None:
        sent_cancel = False
        while not self._done.wait(0.2):
            if self.first_at is None:
                continue
            late = time.monotonic() - self.first_at
            if late >= CANCEL_AFTER and not sent_cancel:
                sent_cancel = True
                self._to_loop(self._cancel)
            if late >= HARD_EXIT_AFTER:
                self._hard_exit()

    def _hard_exit(self) -> None:
        try:
            kill_all_now()
            os.write(2, b"milabench: interrupted; the run did not stop in time, killed\n")
        finally:
            os._exit(self.exit_code())

    def exit_code(self) -> int:
        return EXIT_INTERRUPTED if self.signum == signal.SIGINT else 128 + self.signum


async def _run(
    suite,
    run_dir: Path,
    sinks: list,
    *,
    repeat: int,
    resume: bool,
    interrupts: _Interrupts | None = None,
    launcher: Launcher | None = None,
    check_environment: EnvironmentCheck | None = None,
) -> list[BenchmarkResult]:
    stop_event = asyncio.Event()
    if interrupts is not None:
        interrupts.attach(asyncio.get_running_loop(), stop_event, asyncio.current_task())
    try:
        return await run_suite(
            suite.entries,
            suite.system,
            run_dir,
            sinks,
            repeat=repeat,
            resume=resume,
            stop_event=stop_event,
            grace=_option(suite.system, "run.grace", 5.0),
            early_stop_grace=_option(suite.system, "run.early_stop_grace", 2.0),
            launcher=launcher,
            check_environment=check_environment,
        )
    except asyncio.CancelledError:
        if interrupts is None or not interrupts.cancelled:
            raise
        return []  # the run files hold what was done; the report reads them
    finally:
        if interrupts is not None:
            interrupts.detach()
        close = getattr(launcher, "close", None)  # SSH connections of a remote launcher
        if close is not None:
            try:
                await asyncio.wait_for(close(), REMOTE_CLOSE_TIMEOUT)
            except (TimeoutError, OSError):
                pass


def run_session(
    suite,
    run_dir: Path,
    *,
    repeat: int = 1,
    resume: bool = False,
    dash: str = "no",
    out: IO[str] | None = None,
    launcher: Launcher | None = None,
    check_environment: EnvironmentCheck | None = None,
    report: ReportCallback | None = None,
) -> int:
    """Run `suite` into `run_dir`, then ``report(run_dir, out)``; returns its exit code
    (0 without a ``report``), or the interruption's.

    `launcher` reaches other nodes, `check_environment` vets each benchmark's environment
    and `report` judges the run folder: all are chosen by the caller (`milabench.cli.run`),
    which knows the back-ends and the report; this layer only runs what it is given.
    """
    out = out or sys.stdout
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    files = RunFileSink(run_dir)
    console = make_console_sink(dash, out, total=len(suite.entries) * repeat)
    sinks = [files] + ([console] if console is not None else [])
    interrupts = _Interrupts()
    interrupts.install()
    try:
        try:
            asyncio.run(
                _run(
                    suite,
                    run_dir,
                    sinks,
                    repeat=repeat,
                    resume=resume,
                    interrupts=interrupts,
                    launcher=launcher,
                    check_environment=check_environment,
                )
            )
        finally:
            for sink in sinks:
                sink.close()
        out.write(f"\nRun folder: {run_dir}\n")
        code = report(run_dir, out) if report is not None else 0
        out.flush()
    finally:
        interrupts.uninstall()
    if interrupts.signum:
        print("milabench: interrupted", file=sys.stderr)
        return interrupts.exit_code()
    if files.write_error is not None:
        # The machine's fault (a full disk): the files keep their complete lines only, and
        # the report above judged what they hold (a cut file has no `end` event: FAIL), so
        # the printed verdict and the exit code stay one rule.
        print(f"milabench: error: {files.write_error}", file=sys.stderr)
    return code
