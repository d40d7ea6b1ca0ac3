"""Losses kept lazily until their step is converted, then read without stalling.

A training loop hands over its loss every step; reading it then (``.item()``) would
wait for the device to finish the step, which is what the timing must never do. So
`LossBuffer.add` only detaches the tensor and notes the time and step. When the steps up
to some index have been converted, `LossBuffer.take` returns the losses of those steps
as floats: device tensors are first copied to pinned host memory behind the step that
computed them (`start_host_copy`) and handed out once the copy has landed (an event
*queried*); at the end (``final``) each copy in flight is waited for, then everything is
read at once. Batches come out in the
order the losses were added. torch is never imported here (only used when the benchmark
already imported it).
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any


class LossBuffer:
    """Losses not yet written: values, ``perf_counter`` times, and the step of each
    (three lists rather than a tuple per loss: one object fewer per step for the
    garbage collector, which costs more than the rest of `add`)."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.times: list[float] = []
        self.steps: list[int] = []
        self.copies: list[tuple[Any, Any, list[float]]] = []  # device -> host, in flight

    def add(self, loss: Any, step: int) -> None:
        """Keep ``loss`` (a tensor is detached, not read) as the loss of step ``step``."""
        detach = getattr(loss, "detach", None)
        self.values.append(detach() if detach is not None else loss)
        self.times.append(time.perf_counter())
        self.steps.append(step)

    def clear(self) -> None:
        """Forget what was kept (a rank that reports nothing)."""
        self.values.clear()
        self.times.clear()
        self.steps.clear()

    def take(
        self, boundary: int, final: bool, on_device: bool
    ) -> list[tuple[list[float], list[float]]]:
        """Batches of (losses, ``perf_counter`` times) ready to write: those of the steps
        before ``boundary`` (all of them when ``final``). With ``on_device``, the newly
        due losses start their copy to the host and come out of a later call."""
        out: list[tuple[list[float], list[float]]] = []
        landed = 0
        for event, host, times in self.copies:
            if final:
                event.synchronize()  # the pinned buffer holds garbage until it has landed
            elif not event.query():
                break  # copies land in order: the later ones are not there either
            out.append(([float(x) for x in host.tolist()], times))
            landed += 1
        if landed:
            del self.copies[:landed]
        if not self.values:
            return out
        n = len(self.values) if final else sum(1 for s in self.steps if s < boundary)
        if n == 0:
            return out
        values, times = self.values[:n], self.times[:n]
        del self.values[:n], self.times[:n], self.steps[:n]
        if not final and on_device:
            copy = start_host_copy(values)
            if copy is not None:
                self.copies.append((copy[0], copy[1], times))
                return out
        out.append((loss_values(values), times))
        return out


def start_host_copy(values: list[Any]) -> tuple[Any, Any] | None:
    """Copy device loss tensors to pinned host memory without waiting; (event, host).

    The copy is queued behind the step that computed the losses; the event says when it
    has landed. None when the values are not CUDA tensors (they are converted now).
    """
    torch = sys.modules.get("torch")
    if torch is None or not values or not all(isinstance(v, torch.Tensor) for v in values):
        return None
    if values[0].device.type != "cuda":
        return None
    try:
        stacked = torch.stack([v.reshape(()).float() for v in values])
        host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
        host.copy_(stacked, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    except (RuntimeError, TypeError):
        return None
    return event, host


def loss_values(values: list[Any]) -> list[float]:
    """Floats of the stored losses: one device transfer for accelerator tensors, a cheap
    ``item()`` each for host tensors (stacking costs more than it saves on CPU); a value
    that is no number is NaN."""
    torch = sys.modules.get("torch")
    if torch is not None and values and all(isinstance(v, torch.Tensor) for v in values):
        if values[0].device.type != "cpu":
            try:
                stacked = torch.stack(values)
            except RuntimeError:  # different shapes: make them scalars first
                stacked = torch.stack([v.reshape(()) for v in values])
            try:
                return [float(x) for x in stacked.reshape(-1).tolist()][: len(values)]
            except (RuntimeError, ValueError):
                pass
    out = []
    for v in values:
        item = getattr(v, "item", None)
        try:
            out.append(float(item() if item is not None else v))
        except (TypeError, ValueError, RuntimeError):
            out.append(math.nan)
    return out
