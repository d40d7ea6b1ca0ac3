"""Ending a benchmark cleanly once its observation budget is spent.

The budget is reached deep inside a training loop, where a plain ``break`` cannot reach
the outer epoch loop. `StopProgram` is raised instead and turned into a successful exit
by `run_main` or `budget`. It derives from ``BaseException`` so that a benchmark's own
``except Exception`` does not swallow it. When the process runs under ``voir``, it also
derives from ``voir.phase.StopProgram`` so that voir's overseer ends the run the same
way (phase ``finalize``, exit code 0) without any help.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def _base() -> type[BaseException]:
    phase = sys.modules.get("voir.phase")  # only when voir is already loaded
    base = getattr(phase, "StopProgram", None)
    if isinstance(base, type) and issubclass(base, BaseException):
        return base
    return BaseException


class StopProgram(_base()):  # type: ignore[misc]
    """The observation budget is spent: the benchmark should end with exit code 0."""


def _flush_default_writer() -> None:
    from benchkit import channel

    if channel._default_writer is not None:
        channel._default_writer.flush()


def is_stop(exc: BaseException) -> bool:
    """True for benchkit's stop signal and for voir's (both mean "ended early")."""
    if isinstance(exc, StopProgram):
        return True
    phase = sys.modules.get("voir.phase")
    base = getattr(phase, "StopProgram", None)
    return isinstance(base, type) and isinstance(exc, base)


@contextmanager
def budget() -> Iterator[None]:
    """``with benchkit.budget(): train()``: the budget's stop ends the block quietly."""
    try:
        yield
    except BaseException as exc:
        if not is_stop(exc):
            raise
    finally:
        _flush_default_writer()


def run_main(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; a budget stop becomes ``SystemExit(0)`` after the records are flushed.

    Other return values are passed through, so ``sys.exit(run_main(main))`` keeps the
    script's own exit code.
    """
    try:
        return fn(*args, **kwargs)
    except BaseException as exc:
        if not is_stop(exc):
            raise
        _flush_default_writer()
        raise SystemExit(0) from None
