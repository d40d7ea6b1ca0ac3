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
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchkit.channel import DataWriter
from benchkit.monitors import Monitor
from benchkit.options import BenchOptions, load_options
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
    """State shared by the helpers of one voir run: options, writer, iterators, monitor."""

    def __init__(self, ov: Any, options: BenchOptions, writer: DataWriter) -> None:
        self.ov = ov
        self.options = options
        self.writer = writer
        self.iterators: list[TimedIterator] = []
        self.monitor: Monitor | None = None
        self.fired: dict[str, int] = {}  # selector -> times its probe fired

    @property
    def current(self) -> TimedIterator | None:
        return self.iterators[-1] if self.iterators else None

    def close(self) -> None:
        """Flush everything and let go of the descriptor before voir closes it.

        A probe that never fired is an error event naming its selector: a misspelt
        variable or a function the script never calls would otherwise pass as a run that
        simply had nothing to measure.
        """
        for selector, count in self.fired.items():
            if count == 0:
                self.writer.event(
                    "error",
                    {
                        "type": "ProbeNeverFired",
                        "message": f"probe `{selector}` never fired: check the function "
                        "and variable names it selects",
                    },
                )
        for it in self.iterators:
            if not it.done:
                it.close()
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        self.writer.detach()


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
    opts = session.options
    ov = session.ov
    session.fired.setdefault(selector, 0)

    def wrap(loader: Any) -> TimedIterator:
        session.fired[selector] += 1
        previous = session.current
        it = TimedIterator(
            loader,
            batch_size=batch_size,
            device=device,
            stop=opts.stop,
            skip=opts.skip,
            interval=opts.interval,
            writer=session.writer,
            task=task,
            units=units,
            on_stop=early_stop(session),
            monitor=False,  # the session owns the monitor
        )
        if previous is not None:  # one window across loaders (a new loader per epoch)
            it.continue_from(previous)
        session.iterators.append(it)
        return it

    probe = ov.probe(selector, overridable=True)
    probe[_focus(selector)].override(wrap)
    return probe


def _focus(selector: str) -> str:
    """The focus variable of a simple selector (``//main > loader`` -> ``loader``)."""
    name = selector.rsplit(">", 1)[-1].strip().split()[0].lstrip("!")
    return name.split(":", 1)[0].split("=", 1)[0]


def probe_loss(session: Session, selector: str) -> Any:
    """Record every value assigned to the probed variable as a lazy loss of the current
    `TimedIterator` (a tensor is only read at the next flush)."""
    ov = session.ov
    variable = _focus(selector)
    session.fired.setdefault(selector, 0)

    def record(data: dict[str, Any]) -> None:
        session.fired[selector] += 1
        it = session.current
        if it is not None and not it.done:
            it.record_loss(data[variable])

    probe = ov.probe(selector)
    probe.subscribe(record)
    return probe


def start_monitor(session: Session) -> Monitor | None:
    """Start the background monitor at the ``gpu_poll`` interval (0 disables it)."""
    if session.options.gpu_poll <= 0 or not session.writer.enabled:
        return None
    session.monitor = Monitor(session.writer, session.options.gpu_poll).start()
    return session.monitor


def benchkit_instrument(
    *,
    loader: str | None = None,
    loss: str | None = None,
    batch_size: int | Callable[[Any], int] | None = None,
    task: str = "train",
    units: str = "items/s",
    device: Any = None,
    monitor: bool = True,
    on_session: Callable[[Session], None] | None = None,
) -> Callable[[Any], Any]:
    """A voir instrument that measures the script through probes (see module doc).

    ``on_session(session)`` runs once the script is loaded (its functions exist) and
    before it runs, for extra probes of a particular benchmark.
    """

    def instrument_benchkit(ov: Any) -> Any:
        yield ov.phases.init
        ov.argparser.add_from_model("benchkit", Config)
        yield ov.phases.parse_args
        session = Session(ov, resolve_options(ov.options.benchkit), open_writer())
        try:
            if monitor:
                start_monitor(session)
            # Probes resolve the script's functions: they exist once it is loaded.
            yield ov.phases.load_script
            if loader:
                wrap_loader(
                    session, loader, batch_size=batch_size, task=task, units=units, device=device
                )
            if loss:
                probe_loss(session, loss)
            if on_session is not None:
                on_session(session)
            yield ov.phases.run_script
        finally:
            # Script ended, failed, or was stopped: records must reach the pipe before
            # voir's finalize closes it.
            session.close()

    return instrument_benchkit
