"""Push-driven steps: a timer told where steps end, and the hooks that tell it.

`StepTimer` is a `benchkit.timing.TimedIterator` without a loader: the same measurement
(window, records, device events, distributed meetings) driven by calls instead of
iteration, `boundary` (a step ended, the next began) or `enter`/`exit` (a step runs
between the two). The hooks that make those calls from a running script are here too,
standard library only and independent of voir:

* `wrap_calls`: a function of the script, or an importable ``pkg.mod.Class.method``
  (found by `resolve_callable`), replaced by a wrapper that reports each call's entry
  and return with its arguments, and can be undone;
* `LineTracer`: each start of a source line (``script.py:42``, read by `parse_line`),
  the only way into module-level code. Its ``sys.settrace`` hook turns line events on
  only in frames whose code holds that line and returns None for every other code
  object, so elsewhere only a function-entry check is paid; those entries are counted
  and their cost is reported as overhead (`benchkit.overhead`);
* `step_kind` (is a step selector a probe, a call or a line) and `size_of` (the items
  of a value).

Wiring a voirfile's step selector to these pieces (ptera probes included) is
`benchkit.stepmode`'s job.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from benchkit.timing import TimedIterator

_INF = float("inf")


class StepTimer(TimedIterator):
    """A `TimedIterator` without a loader: `boundary`, or `enter`/`exit`, mark the steps.

    ``boundary(size)``: one step ended and the next began (contiguous steps, e.g. each
    assignment of ``loss`` in a loop). ``enter()`` / ``exit(size)``: one step runs
    between the two (a call of ``train()``); time between calls is not a step.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__((), **kwargs)
        self._mark: Any = None  # start of the step in progress (perf_counter or event)
        self._next_check = _INF
        self._trigger_at: int | float = 0

    def __iter__(self):  # type: ignore[override]
        raise TypeError("a StepTimer is driven by boundary()/enter()/exit(), not iterated")

    @property
    def in_step(self) -> bool:
        """A step is under way: the next `boundary` (or `exit`) ends it and needs its size
        (the first boundary only starts the clock: no size is read for it)."""
        return self._mark is not None and not self.done

    def _stamp(self) -> tuple[Any, float]:
        now = time.perf_counter()
        clock = self.meter.clock
        if not clock.on_device:
            return now, now
        return clock.record(), now

    def _arm(self, now: float) -> None:
        self._next_check = self.meter.next_check(now)
        self._trigger_at = self.meter.trigger()

    def _started(self, now: float) -> None:
        self._start_monitor()
        self.meter.begin(now)
        self._arm(now)

    def boundary(self, size: Any) -> None:
        """A step ends here and the next one starts."""
        if self.done:
            return
        mark, now = self._stamp()
        if self._mark is None:
            if self.window.started is None:
                self._started(now)
            self._mark = mark
            return
        self._push(mark, now, size)

    def enter(self) -> None:
        """A step starts (a call of the step function)."""
        if self.done:
            return
        mark, now = self._stamp()
        if self.window.started is None:
            self._started(now)
        self._mark = mark

    def exit(self, size: Any) -> None:
        """The step started by `enter` ends."""
        if self.done or self._mark is None:
            return
        mark, now = self._stamp()
        self._push(mark, now, size)
        self._mark = None

    def _push(self, mark: Any, now: float, size: Any) -> None:
        meter = self.meter
        pending = meter.pending
        pending.starts.append(self._mark)
        pending.ends.append(mark)
        pending.sizes.append(size)
        meter.count += 1
        if now >= self._next_check or meter.count >= self._trigger_at:
            meter.check(now)  # may end the window: on_stop runs (voir: StopProgram)
            if meter.done:
                return
            self._arm(time.perf_counter())
            self._mark = self._stamp()[0]  # bookkeeping time is not the script's
        else:
            self._mark = mark

    def close(self) -> None:
        self._mark = None
        if self.window.started is None:  # no step ever began: no window to summarise
            self.meter.done = True
            self._stop_monitor()
            return
        super().close()


# A bare variable name (a step's own value), as opposed to a selector or a line.
NAME = re.compile(r"^[A-Za-z_]\w*$")


def step_kind(step: str) -> str:
    """``probe`` (a ptera selector: ``//train > loss``), ``line`` (``script.py:42``), or
    ``call`` (``train()``, ``torch.optim.SGD.step``)."""
    if parse_line(step, "x.py") is not None:
        return "line"
    if ">" in step:
        return "probe"
    return "call"


# -- sizes ------------------------------------------------------------------------------


def size_of(value: Any) -> float:
    """Items in a probed value: a number as is, else the first dimension (``len``)."""
    if isinstance(value, bool):
        raise TypeError("a bool is not a batch size")
    if isinstance(value, int | float):
        return float(value)
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) == 0:  # a 0-d tensor holding a count
        return float(value.item())
    return float(len(value))


# -- calls ------------------------------------------------------------------------------


def resolve_callable(spec: str, script_globals: dict[str, Any]) -> tuple[Any, str, Any]:
    """``train`` (a function of the script) or ``pkg.module.Class.method`` (importable):
    the owner object, the attribute name, and the current value."""
    name = spec.strip()
    if name.endswith("()"):
        name = name[:-2]
    parts = [p for p in name.split(".") if p]
    if not parts:
        raise ValueError(f"`{spec}`: no function named")
    if len(parts) == 1 or parts[0] in script_globals:
        owner: Any = _GlobalsOwner(script_globals)
        rest = parts
    else:
        import importlib

        owner = None
        for cut in range(len(parts) - 1, 0, -1):
            try:
                owner = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            rest = parts[cut:]
            break
        if owner is None:
            raise ValueError(f"`{spec}`: no importable module in `{name}`")
    for attr in rest[:-1]:
        try:
            owner = getattr(owner, attr)
        except AttributeError:
            raise ValueError(f"`{spec}`: `{attr}` not found") from None
    try:
        value = getattr(owner, rest[-1])
    except AttributeError:
        raise ValueError(f"`{spec}`: `{rest[-1]}` not found") from None
    if not callable(value):
        raise ValueError(f"`{spec}`: `{rest[-1]}` is not callable")
    return owner, rest[-1], value


class _GlobalsOwner:
    """getattr/setattr over the script's global namespace (``train`` of ``__main__``)."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        object.__setattr__(self, "_ns", namespace)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._ns[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._ns[name] = value


def wrap_calls(
    owner: Any,
    attr: str,
    on_enter: Callable[[], None],
    on_exit: Callable[[dict[str, Any]], None],
) -> Callable[[], None]:
    """Replace ``owner.attr`` by a wrapper that reports every call; returns the undo.

    ``on_exit`` receives the call's arguments by name (``inspect.signature`` binding,
    computed only when the call returns normally) so a batch size can be a function
    of them. A call that raises is not a step.
    """
    if isinstance(owner, _GlobalsOwner):
        original = getattr(owner, attr)
        owned = True
    else:
        original = inspect.getattr_static(owner, attr)
        # Found on the owner itself, or through its class / bases (an instance's method,
        # an inherited method): then the undo removes the wrapper rather than pinning the
        # raw attribute onto the owner (an unbound function in an instance's dict).
        owned = attr in getattr(owner, "__dict__", {})
    target = getattr(owner, attr)  # a bound method stays bound
    try:
        signature: inspect.Signature | None = inspect.signature(target)
    except (TypeError, ValueError):
        signature = None

    def arguments(args: tuple, kwargs: dict) -> dict[str, Any]:
        if signature is None:
            return {"args": args, **kwargs}
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return {"args": args, **kwargs}
        bound.apply_defaults()  # ``batch_size="bs"`` of ``def train(data, bs=64)``
        return dict(bound.arguments)

    @functools.wraps(target)
    def step(*args: Any, **kwargs: Any) -> Any:
        on_enter()
        result = target(*args, **kwargs)
        on_exit(arguments(args, kwargs) | {"return": result})
        return result

    # Descriptors only act on a class: on an instance or a module, ``target`` (already
    # bound, or plain) is called as is.
    on_class = isinstance(owner, type)
    replacement: Any
    if on_class and isinstance(original, classmethod):
        # Rebound on each call, so that ``Sub.make()`` still receives ``Sub`` (``target``
        # is bound to the class it was looked up on).
        func = original.__func__

        @functools.wraps(func)
        def class_step(cls: Any, *args: Any, **kwargs: Any) -> Any:
            on_enter()
            result = func(cls, *args, **kwargs)
            on_exit(arguments(args, kwargs) | {"return": result})
            return result

        replacement = classmethod(class_step)
    elif on_class and isinstance(original, staticmethod):
        # ``target`` is the plain function: the wrapper must not receive an instance.
        replacement = staticmethod(step)
    else:
        replacement = step
    setattr(owner, attr, replacement)

    def undo() -> None:
        if owned:
            setattr(owner, attr, original)
        else:
            delattr(owner, attr)

    return undo


# -- lines ------------------------------------------------------------------------------


def parse_line(spec: str, script: str | None) -> tuple[str, int] | None:
    """``sine.py:42`` / ``:42`` -> (absolute file, 42); None when ``spec`` is not a line."""
    text = spec.strip()
    head, sep, tail = text.rpartition(":")
    if not sep or not tail.isdigit():
        return None
    path = head or script
    if not path:
        raise ValueError(f"`{spec}`: which file? (write `script.py:{tail}`)")
    if script and not os.path.isabs(path) and not os.path.exists(path):
        # relative to the script's folder, as one reads it in the script's listing
        candidate = os.path.join(os.path.dirname(os.path.abspath(script)), path)
        if os.path.exists(candidate) or os.path.basename(path) == os.path.basename(script):
            path = candidate
    return os.path.realpath(path), int(tail)


class LineTracer:
    """Call ``callback(frame)`` each time ``filename:lineno`` starts to run."""

    def __init__(self, filename: str, lineno: int, callback: Callable[[FrameType], None]) -> None:
        self.filename = os.path.realpath(filename)
        self.lineno = lineno
        self.callback = callback
        self.events = 0  # function entries looked at since the first hit (the cost)
        self.lines = 0  # events of the watched frames since the first hit (their cost)
        self.hits = 0
        self._codes: dict[CodeType, bool] = {}
        self._installed = False
        self._previous: Any = None
        self._tool: int | None = None

    def _matches(self, code: CodeType) -> bool:
        known = self._codes.get(code)
        if known is None:
            known = (
                os.path.realpath(code.co_filename) == self.filename
                and not _defined_on(code, self.lineno)
                and any(line == self.lineno for _, _, line in code.co_lines())
            )
            self._codes[code] = known
        return known

    # Python 3.11: a global trace hook that enables line events only in matching frames.
    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        if self.hits:  # entries before the first step (imports) are no step's cost
            self.events += 1
        if self._matches(frame.f_code):
            return self._local
        return None

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        # Every line of a watched frame comes here (a line inside ``train`` makes each
        # line of ``train`` pay for the hook): counted, since that is part of the cost.
        if self.hits:
            self.lines += 1
        if event == "line" and frame.f_lineno == self.lineno:
            self.hits += 1
            self.callback(frame)
        return self._local

    def install(self) -> None:
        """Start tracing the calling thread (the script's): code started from now on."""
        if not self._installed:
            self._installed = True
            self._previous = sys.gettrace()  # a debugger's or coverage's, given back after
            sys.settrace(self._global)

    def uninstall(self) -> None:
        if self._installed:
            sys.settrace(self._previous)
            self._previous = None
            self._installed = False


def _defined_on(code: CodeType, lineno: int) -> bool:
    """A code object nested in the statement of that line (a comprehension, a lambda, a
    generator expression, a one-line ``def``): its line events are that statement's
    inner workings, not new starts of the line (``[f(v) for v in xs]`` starts once)."""
    return code.co_firstlineno == lineno and code.co_name != "<module>"
