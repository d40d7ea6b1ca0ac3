"""Step mode of a voirfile: ``benchkit_instrument(step=...)`` made into a running timer.

`measure_steps` turns a step selector and its options into a `benchkit.steps.StepTimer`
registered on the voir `benchkit.session.Session`: it picks the source of the steps (a
ptera probe firing, a wrapped call, a traced line; `step_kind`), and reads each step's
items (``batch_size``: a number, a variable of the step, another probe's last value, or
a function of the values) and loss from the step's own values (captured variables, call
arguments and return value, frame locals) or from another probe. Every callback goes
through the session's guard (timed as overhead; one that raises becomes an ``error``
event naming its selector) and every selector's firings are counted, so one that never
fires is reported. The step mechanics themselves are `benchkit.steps`'s.
"""

from collections import ChainMap
from collections.abc import Callable
from typing import Any

from benchkit.session import Session, focus_of, install_probe, probe_loss
from benchkit.steps import (
    NAME,
    LineTracer,
    StepTimer,
    parse_line,
    resolve_callable,
    size_of,
    step_kind,
    wrap_calls,
)

Values = dict[str, Any]
BatchSize = int | float | str | Callable[[Values], Any] | tuple[str, Callable[[Any], Any]] | None


def _latest(session: Session, selector: str) -> Callable[[], Any]:
    """A probe that keeps the last value of a variable; returns its reader."""
    variable = focus_of(selector)
    box: dict[str, Any] = {}
    session.fired.setdefault(selector, 0)

    def keep(data: Values) -> None:
        session.fired[selector] += 1
        session.probe_fires += 1
        box["value"] = data[variable]

    install_probe(session, selector).subscribe(session.guard(selector, keep))

    def read() -> Any:
        if "value" not in box:
            raise LookupError(f"`{selector}` has no value yet at the end of the first step")
        return box["value"]

    return read


def _value_reader(session: Session, source: str) -> Callable[[Values], Any]:
    """A variable of the step's own values (a bare name) or of another probe (selector)."""
    if NAME.match(source):

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
    step_loss = loss if loss is not None and NAME.match(loss) else None
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

        install_probe(session, step).subscribe(session.guard(step, fire))
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
