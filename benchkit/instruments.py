"""What a ``voirfile.py`` needs to measure a third-party script without editing it.

``voir`` runs the script through phases (init, parse_args, load_script, run_script,
finalize) and lets instruments attach to the script's variables with ``ptera`` probes.
The helpers here speak the same records as `benchkit.records`, written through the same
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
`open_writer`, `Session` (benchkit.session), `wrap_loader`, `probe_loss`,
`measure_steps` (benchkit.stepmode), `start_monitor`, `early_stop`.

This module imports ``voir`` lazily: it is only ever used inside a voirfile, where voir
is running, and importing it elsewhere must stay free.
"""

import os
import sys
from collections.abc import Callable
from typing import Any

from benchkit.monitors import Monitor
from benchkit.session import (  # noqa: F401 - the names voirfiles import from here
    Config,
    ProbeInstallError,
    Session,
    early_stop,
    focus_of,
    install_probe,
    open_writer,
    probe_loss,
    resolve_options,
)
from benchkit.stepmode import BatchSize, measure_steps
from benchkit.steps import step_kind
from benchkit.timing import TimedIterator


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

    probe = install_probe(session, selector, overridable=True)
    probe[focus_of(selector)].override(session.guard(selector, wrap, fallback=lambda x: x))
    return probe


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
