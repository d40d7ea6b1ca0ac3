"""What a ``voirfile.py`` needs to measure a third-party script without editing it.

``voir`` runs the script through phases (init, parse_args, load_script, run_script,
finalize) and lets instruments attach to the script's variables with ``ptera`` probes.
The helpers here speak the same records as `benchkit.timing`, written through the same
batched `DataWriter` on the descriptor voir uses (``DATA_FD``, default 3).

A complete voirfile for a script whose ``main()`` builds ``loader`` and computes
``loss`` in ``train_step``::

    from benchkit.instruments import benchkit_instrument

    instrument_main = benchkit_instrument(
        loader="//main > loader",          # wrap the value assigned to `loader` in main()
        loss="//train_step > loss",        # record each value assigned to `loss`
    )

The selectors are ptera's: ``//f > x`` is variable ``x`` of function ``f`` of the script
(``/module.path/f > x`` for an imported module). The budget comes from voir options
(``--stop``, ``--skip``, ``--interval``, ``--gpu-poll``: the orchestrator passes the
entry's ``voir.options`` that way), else from ``MILABENCH_CONFIG``, else the defaults;
the time window comes from the entry's ``measure`` block (docs/measurement.md). When the
window ends the wrapped loader writes the ``window`` record and the ``stop`` event, and
voir's ``StopProgram`` ends the script with exit code 0.

Lower-level pieces for hand-written instruments: `Config`, `resolve_options`,
`open_writer`, `wrap_loader`, `probe_loss`, `start_monitor`, `early_stop`.

This module imports ``voir`` lazily: it is only ever used inside a voirfile, where voir
is running, and importing it elsewhere must stay free.
"""

import os
import re
import stat
import sys
import time
import warnings
from collections import ChainMap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchkit import overhead
from benchkit.channel import DataWriter
from benchkit.monitors import Monitor
from benchkit.options import BenchOptions, load_options
from benchkit.steps import LineTracer, StepTimer, parse_line, resolve_callable, size_of, wrap_calls
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


def _probe(session: Session, selector: str, **kwargs: Any) -> Any:
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
    kind = step_kind(selector) if not _NAME.match(selector) else "name"
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


def wrap_loader(
    session: Session,
    selector: str,
    *,
    batch_size: int | Callable[[Any], int] | None = None,
    task: str = "train",
    units: str = "items/s",
    device: Any = None,
) -> Any:
    """Replace the value assigned to the probed variable by a `TimedIterator` over it.

    ``selector`` focuses on the variable (``//main > loader``); every assignment is
    wrapped, and all of them share one measurement window (no second warm-up when a
    script builds a new loader every epoch).
    """
    session.fired.setdefault(selector, 0)

    def wrap(loader: Any) -> TimedIterator:
        session.fired[selector] += 1
        session.probe_fires += 1
        previous = session.current
        it = TimedIterator(
            loader, batch_size=batch_size, **session.timer_options(task, units, device)
        )
        if previous is not None:  # one window across loaders (a new loader per epoch)
            it.continue_from(previous)
        session.iterators.append(it)
        return it

    probe = _probe(session, selector, overridable=True)
    probe[_focus(selector)].override(session.guard(selector, wrap, fallback=lambda x: x))
    return probe


def _focus(selector: str) -> str:
    """The focus variable of a simple selector (``//main > loader`` -> ``loader``)."""
    name = selector.rsplit(">", 1)[-1].strip().split()[0].lstrip("!")
    return name.split(":", 1)[0].split("=", 1)[0]


def probe_loss(session: Session, selector: str) -> Any:
    """Record every value assigned to the probed variable as a lazy loss of the current
    timer (a tensor is only read at the next flush)."""
    variable = _focus(selector)
    session.fired.setdefault(selector, 0)

    def record(data: dict[str, Any]) -> None:
        session.fired[selector] += 1
        session.probe_fires += 1
        it = session.current
        if it is not None and not it.done:
            it.record_loss(data[variable])

    probe = _probe(session, selector)
    probe.subscribe(session.guard(selector, record))
    return probe


# -- step mode ------------------------------------------------------------------------

_NAME = re.compile(r"^[A-Za-z_]\w*$")
Values = dict[str, Any]
BatchSize = int | float | str | Callable[[Values], Any] | tuple[str, Callable[[Any], Any]] | None


def step_kind(step: str) -> str:
    """``probe`` (a ptera selector: ``//train > loss``), ``line`` (``script.py:42``), or
    ``call`` (``train()``, ``torch.optim.SGD.step``)."""
    if parse_line(step, "x.py") is not None:
        return "line"
    if ">" in step:
        return "probe"
    return "call"


def _latest(session: Session, selector: str) -> Callable[[], Any]:
    """A probe that keeps the last value of a variable; returns its reader."""
    variable = _focus(selector)
    box: dict[str, Any] = {}
    session.fired.setdefault(selector, 0)

    def keep(data: Values) -> None:
        session.fired[selector] += 1
        session.probe_fires += 1
        box["value"] = data[variable]

    _probe(session, selector).subscribe(session.guard(selector, keep))

    def read() -> Any:
        if "value" not in box:
            raise LookupError(f"`{selector}` has no value yet at the end of the first step")
        return box["value"]

    return read


def _value_reader(session: Session, source: str) -> Callable[[Values], Any]:
    """A variable of the step's own values (a bare name) or of another probe (selector)."""
    if _NAME.match(source):

        def from_step(values: Values) -> Any:
            try:
                return values[source]
            except KeyError:
                raise LookupError(
                    f"no variable `{source}` at the step (has: {', '.join(sorted(values))})"
                ) from None

        return from_step
    read = _latest(session, source)
    return lambda values: read()


def _sizer(session: Session, batch_size: BatchSize) -> Callable[[Values], float]:
    """Items of one step: a constant, a variable (its length or value), or a function."""
    if batch_size is None:
        return lambda values: 1.0
    if isinstance(batch_size, bool):
        raise TypeError("batch_size: a bool is not a batch size")
    if isinstance(batch_size, int | float):
        constant = float(batch_size)
        return lambda values: constant
    if isinstance(batch_size, str):
        read = _value_reader(session, batch_size)
        return lambda values: size_of(read(values))
    if isinstance(batch_size, tuple) and len(batch_size) == 2 and callable(batch_size[1]):
        read, fn = _value_reader(session, batch_size[0]), batch_size[1]
        return lambda values: size_of(fn(read(values)))
    if callable(batch_size):
        fn = batch_size
        return lambda values: size_of(fn(values))
    raise TypeError(f"batch_size: {batch_size!r} is not a number, a name, a selector or a function")


def measure_steps(
    session: Session,
    step: str,
    *,
    batch_size: BatchSize = None,
    loss: str | None = None,
    task: str = "train",
    units: str | None = None,
    device: Any = None,
) -> StepTimer:
    """Time the script by its steps: each firing of a probe, each call of a function, or
    each run of a line is a step (see `benchkit_instrument` for the forms)."""
    units = units or ("items/s" if batch_size is not None else "steps/s")
    timer = StepTimer(**session.timer_options(task, units, device))
    session.iterators.append(timer)
    session.fired.setdefault(step, 0)
    sizer = _sizer(session, batch_size)
    step_loss = loss if loss is not None and _NAME.match(loss) else None
    if loss is not None and step_loss is None:
        probe_loss(session, loss)
    if step_loss is not None:
        session.fired.setdefault(step_loss, 0)

    def losses(values: Values) -> None:
        if step_loss is not None and step_loss in values:
            session.fired[step_loss] += 1
            timer.record_loss(values[step_loss])

    kind = step_kind(step)
    if kind == "probe":

        def fire(data: Values) -> None:
            session.fired[step] += 1
            session.probe_fires += 1
            timer.boundary(sizer(data) if timer.in_step else 0.0)
            losses(data)

        _probe(session, step).subscribe(session.guard(step, fire))
    elif kind == "call":
        owner, attr, _ = resolve_callable(step, session.script_globals)
        # ``train()``: a step is one call, entry to return (time between calls, such as
        # an evaluation, is not a step). ``torch.optim.Adam.step``: a step runs from one
        # return of the function to the next (a call that ends each iteration).
        span = step.strip().endswith("()")

        def enter() -> None:
            session.fired[step] += 1
            if span:
                timer.enter()

        def leave(values: Values) -> None:
            if span:
                timer.exit(sizer(values))
            else:
                timer.boundary(sizer(values) if timer.in_step else 0.0)
            losses(values)

        session.undo.append(
            wrap_calls(owner, attr, session.guard(step, enter), session.guard(step, leave))
        )
    else:
        where = parse_line(step, session.script)
        assert where is not None

        last: list[Any] = [None]  # the frame of the previous hit

        def line(frame: Any) -> None:
            session.fired[step] += 1
            values: Any = frame.f_locals
            previous, last[0] = last[0], frame
            if previous is not None and previous is not frame:
                # First hit in a new call (next epoch of ``train``): the step that ends
                # here ran in the previous call, whose variables (as it ended) fill in
                # names this frame does not have yet (``x`` of ``x = inputs[i:j]``).
                values = ChainMap(values, previous.f_locals)
            timer.boundary(sizer(values) if timer.in_step else 0.0)
            losses(values)

        session.tracers.append(LineTracer(where[0], where[1], session.guard(step, line)))
    return timer


def start_monitor(session: Session) -> Monitor | None:
    """Start the background monitor at the ``gpu_poll`` interval (0 disables it)."""
    if session.options.gpu_poll <= 0 or not session.writer.enabled:
        return None
    session.monitor = Monitor(session.writer, session.options.gpu_poll).start()
    return session.monitor


def _script_as_run(ov: Any, session: Session) -> None:
    """Put ``sys.argv`` and ``sys.path[0]`` where ``python script.py args`` would, before
    voir loads the script: code at its top (argparse before the first ``def``) runs then,
    and voir itself only sets ``sys.argv`` later, when the main section starts."""
    options = ov.options
    script = getattr(options, "SCRIPT", None)
    if not script:
        return
    session.script = os.path.abspath(script)
    sys.argv = [script, *(getattr(options, "ARGV", None) or [])]
    folder = os.path.dirname(session.script)
    if folder not in sys.path[:1]:
        sys.path.insert(0, folder)


def benchkit_instrument(
    *,
    loader: str | None = None,
    step: str | None = None,
    batch_size: BatchSize = None,
    loss: str | None = None,
    task: str = "train",
    units: str | None = None,
    device: Any = None,
    monitor: bool = True,
    on_session: Callable[[Session], None] | None = None,
) -> Callable[[Any], Any]:
    """A voir instrument that measures the script from outside (see module doc).

    Say what a step is with one of:

    * ``loader="//main > loader"``: the loop iterates over that loader (wrapped);
    * ``step="//train > loss"``: each assignment of the variable ends a step;
    * ``step="train()"``: each call of the script's ``train`` is a step (entry to return);
    * ``step="torch.optim.SGD.step"`` (no parentheses): a step ends at each return of
      that function (for a call made once per iteration);
    * ``step="script.py:42"``: each time the line starts, a step ends (module code too).

    ``batch_size`` (items per step): a number; a variable name of the step (a probe's
    captured variables, the call's arguments, the line's locals); a selector
    (``//train > data``, its last value); ``(name_or_selector, fn)``; or
    ``fn(values)``. A value is counted by its length (first dimension), a number as is.
    ``loss``: a selector, or a variable name of the step's values.
    ``on_session(session)`` runs once the script is loaded (its functions exist) and
    before it runs, for extra probes of a particular benchmark.
    """
    if loader and step:
        raise ValueError("give `loader` or `step`, not both")

    def install(session: Session, early: bool) -> bool:
        """Install the probes of one moment (before or after the script is loaded);
        False (after naming the selector in an error event) when one cannot be."""
        installing = loader or step or ""
        try:
            if early:  # a line may be anywhere, top-level code run while loading included
                if step and step_kind(step) == "line":
                    measure_steps(
                        session, step, batch_size=batch_size, loss=loss, task=task,
                        units=units, device=device,
                    )  # fmt: skip
                    for tracer in session.tracers:
                        tracer.install()
                return True
            if loader:
                wrap_loader(
                    session, loader, batch_size=batch_size, task=task,  # type: ignore[arg-type]
                    units=units or "items/s", device=device,
                )  # fmt: skip
            elif step and step_kind(step) != "line":
                measure_steps(
                    session, step, batch_size=batch_size, loss=loss, task=task, units=units,
                    device=device,
                )  # fmt: skip
            if loss and not step:
                installing = loss
                probe_loss(session, loss)
            if on_session is not None:
                installing = "on_session"
                on_session(session)
        except Exception as err:  # noqa: BLE001 - named, then the script is not run
            if isinstance(err, ProbeInstallError):
                installing = err.selector
            session.error(installing, "cannot be installed", err)
            session.close()
            return False
        return True

    def instrument_benchkit(ov: Any) -> Any:
        yield ov.phases.init
        ov.argparser.add_from_model("benchkit", Config)
        yield ov.phases.parse_args
        session = Session(ov, resolve_options(ov.options.benchkit), open_writer())
        session.task = task
        _script_as_run(ov, session)
        try:
            if monitor:
                start_monitor(session)
            if not install(session, early=True):
                ov.stop("benchkit: a probe could not be installed")
            # Probes resolve the script's functions: they exist once it is loaded.
            yield ov.phases.load_script
            main = sys.modules.get("__main__")
            session.script_globals = vars(main) if main is not None else {}
            if not install(session, early=False):
                ov.stop("benchkit: a probe could not be installed")
            yield ov.phases.run_script
        finally:
            # Script ended, failed, or was stopped: records must reach the pipe before
            # voir's finalize closes it.
            session.close()

    return instrument_benchkit
