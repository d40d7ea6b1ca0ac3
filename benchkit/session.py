"""The state a voirfile's instrument keeps while voir runs a script, and its probes.

`Session` holds the options, the writer on voir's data descriptor, the timers, which
probe fired how often, and what the instrumentation cost; `install_probe` checks a
selector with ptera before handing it to voir, so a misspelt one is named before the
script runs. `benchkit.instruments` builds instruments on it; `benchkit.stepmode` adds
the step modes.
"""

import os
import stat
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchkit import overhead
from benchkit.channel import DataWriter
from benchkit.monitors import Monitor
from benchkit.options import BenchOptions, load_options
from benchkit.steps import NAME, LineTracer, StepTimer, step_kind
from benchkit.timing import TimedIterator

# No ``from __future__ import annotations`` here: voir builds its command-line options
# from the dataclass field types, which must be real types, not strings.


@dataclass
class Config:
    """benchkit measurement options (given to voir before the script)."""

    # Timed observations to collect before ending the script (0: no budget)
    stop: int = None  # type: ignore[assignment]
    # Warm-up observations that are neither timed nor recorded
    skip: int = None  # type: ignore[assignment]
    # Seconds between progress records (accepts units: 1s, 250ms)
    interval: str = None  # type: ignore[assignment]
    # Seconds between monitor samples (0: no monitor)
    gpu_poll: str = None  # type: ignore[assignment]
    # Accepted for compatibility with suites that set it; the dashboard is milabench's
    dash: bool = False


def resolve_options(config: Any = None) -> BenchOptions:
    """voir options (None = not given) over ``MILABENCH_CONFIG`` over the defaults."""
    if config is None:
        return load_options()
    return load_options(
        stop=getattr(config, "stop", None),
        skip=getattr(config, "skip", None),
        interval=getattr(config, "interval", None),
        gpu_poll=getattr(config, "gpu_poll", None),
    )


def open_writer() -> DataWriter:
    """A writer on voir's data descriptor (``DATA_FD``, default 3 like voir).

    When that descriptor is not open (script run by hand under voir), the writer is
    disabled, as voir's own logger is.
    """
    raw = os.environ.get("DATA_FD", "3") or "3"
    fd = int(raw)
    if fd != 1:
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            return DataWriter(fd=None)
        if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)):
            return DataWriter(fd=None)
    return DataWriter(fd=fd)


class Session:
    """State shared by the helpers of one voir run: options, writer, timers, monitor,
    which probe fired how often, and what the instrumentation itself cost."""

    def __init__(self, ov: Any, options: BenchOptions, writer: DataWriter) -> None:
        self.ov = ov
        self.options = options
        self.writer = writer
        self.iterators: list[TimedIterator] = []
        self.monitor: Monitor | None = None
        self.fired: dict[str, int] = {}  # selector -> times its probe fired
        self.failed: set[str] = set()  # selectors whose probe raised or could not install
        self.task = "train"
        self.script: str | None = None
        self.script_globals: dict[str, Any] = {}
        self.timed_seconds = 0.0  # inside benchkit callbacks (the measured overhead)
        self.probe_fires = 0  # ptera firings (their dispatch cost is calibrated)
        self.tracers: list[LineTracer] = []
        self.undo: list[Callable[[], None]] = []
        self.closed = False

    @property
    def current(self) -> TimedIterator | None:
        return self.iterators[-1] if self.iterators else None

    def timer_options(self, task: str, units: str, device: Any) -> dict[str, Any]:
        """What every timer of the session shares: bounds, writer, stop action."""
        opts = self.options
        return {
            "device": device,
            "stop": opts.stop,
            "skip": opts.skip,
            "interval": opts.interval,
            "writer": self.writer,
            "task": task,
            "units": units,
            "on_stop": early_stop(self),
            "monitor": False,  # the session owns the monitor
        }

    def error(self, selector: str, what: str, err: BaseException | None = None) -> None:
        """One ``error`` event per selector, naming it (the entry then fails)."""
        if selector in self.failed:
            return
        self.failed.add(selector)
        message = f"probe `{selector}` {what}"
        if isinstance(err, ProbeInstallError):
            message += f": {err}"
        elif err is not None:
            message += f": {type(err).__name__}: {err}"
        self.writer.event("error", {"type": "ProbeError", "message": message})
        self.writer.flush()
        print(f"benchkit: {message}", file=sys.stderr)

    def guard(
        self,
        selector: str,
        callback: Callable[..., Any],
        fallback: Callable[..., Any] | None = None,
    ) -> Callable[..., Any]:
        """``callback`` timed as overhead; if it raises, the selector is named in an error
        event, the probe goes quiet (``fallback`` answers instead) and the script goes on.
        voir's ``StopProgram`` (a BaseException: the window is over) passes through."""

        def guarded(*args: Any) -> Any:
            if selector in self.failed:
                return fallback(*args) if fallback is not None else None
            start = time.perf_counter()
            try:
                return callback(*args)
            except Exception as err:  # noqa: BLE001 - reported, then the script goes on
                self.error(selector, "raised", err)
                return fallback(*args) if fallback is not None else None
            finally:
                self.timed_seconds += time.perf_counter() - start

        return guarded

    def close(self) -> None:
        """Flush everything and let go of the descriptor before voir closes it.

        A probe that never fired is an error event naming its selector: a misspelt
        variable or a function the script never calls would otherwise pass as a run that
        simply had nothing to measure. The ``overhead`` record comes last, once every
        step is converted.
        """
        if self.closed:
            return
        self.closed = True
        for tracer in self.tracers:
            tracer.uninstall()
        for undo in reversed(self.undo):
            undo()
        self.undo.clear()
        for selector, count in self.fired.items():
            if count == 0 and selector not in self.failed:
                self.writer.event(
                    "error",
                    {
                        "type": "ProbeNeverFired",
                        "message": f"probe `{selector}` never fired: {_never_fired_hint(selector)}",
                    },
                )
        for it in self.iterators:
            if not it.done:
                it.close()
        self._write_overhead()
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        self.writer.detach()

    def overhead(self) -> dict[str, Any] | None:
        """Instrumentation seconds per step: `benchkit.overhead.record` of this session."""
        steps = sum(it.steps_timed for it in self.iterators)
        step_seconds = sum(it.step_seconds for it in self.iterators)
        # A StepTimer decides inside a guarded callback, already timed; a wrapped loader
        # decides in the script's loop.
        decisions = sum(it.check_seconds for it in self.iterators if not isinstance(it, StepTimer))
        loader_steps = sum(it.count for it in self.iterators if not isinstance(it, StepTimer))
        return overhead.record(
            steps=steps,
            step_seconds=step_seconds,
            timed_seconds=self.timed_seconds + decisions,
            counts={
                "probe": self.probe_fires,
                "trace": sum(t.events for t in self.tracers),
                "line": sum(t.lines for t in self.tracers),
                "loader": loader_steps,
            },
        )

    def _write_overhead(self) -> None:
        if not self.writer.enabled:
            return
        try:
            payload = self.overhead()
        except Exception:  # noqa: BLE001 - a missing figure must not fail the run
            payload = None
        if payload is not None:
            self.writer.write({"task": self.task, "overhead": payload, "time": time.time()})
            self.writer.flush()


class ProbeInstallError(ValueError):
    """A selector ptera cannot install (no such function or variable), with its name."""

    def __init__(self, selector: str, err: Exception) -> None:
        super().__init__(f"{type(err).__name__}: {err}")
        self.selector = selector


def install_probe(session: Session, selector: str, **kwargs: Any) -> Any:
    """``ov.probe(selector)``, after checking now that ptera can install it.

    voir installs probes only when the script starts running and reports a failure as an
    ``overseer_error`` while the script runs on, unmeasured, to its natural end (100
    epochs of it, say). Resolving the selector here, once the script is loaded, lets the
    session name it and stop before the script runs.
    """
    from ptera import probing

    try:
        with warnings.catch_warnings():  # ptera's search touches deprecated torch names
            warnings.simplefilter("ignore")
            with probing(selector):
                pass
    except Exception as err:  # noqa: BLE001 - ptera's SelectorError, NameError, ...
        raise ProbeInstallError(selector, err) from err
    return session.ov.probe(selector, **kwargs)


def _never_fired_hint(selector: str) -> str:
    kind = step_kind(selector) if not NAME.match(selector) else "name"
    if kind == "line":
        return "that line never ran (is it a statement the loop runs?)"
    if kind == "call":
        return "the script never called it"
    if kind == "name":
        return "the step never had a variable of that name"
    return "check the function and variable names it selects"


def early_stop(session: Session) -> Callable[[], None]:
    """The action run once the window's ``stop`` event is written: end the script through
    voir (``ov.stop`` raises voir's ``StopProgram``; voir then finalizes with exit 0)."""

    def stop() -> None:
        session.ov.stop("benchkit: measurement window over")

    return stop


def focus_of(selector: str) -> str:
    """The focus variable of a simple selector (``//main > loader`` -> ``loader``)."""
    name = selector.rsplit(">", 1)[-1].strip().split()[0].lstrip("!")
    return name.split(":", 1)[0].split("=", 1)[0]


def probe_loss(session: Session, selector: str) -> Any:
    """Record every value assigned to the probed variable as a lazy loss of the current
    timer (a tensor is only read at the next flush)."""
    variable = focus_of(selector)
    session.fired.setdefault(selector, 0)

    def record(data: dict[str, Any]) -> None:
        session.fired[selector] += 1
        session.probe_fires += 1
        it = session.current
        if it is not None and not it.done:
            it.record_loss(data[variable])

    probe = install_probe(session, selector)
    probe.subscribe(session.guard(selector, record))
    return probe
