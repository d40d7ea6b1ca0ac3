"""How a step boundary is stamped, and how stamps become seconds.

Contract: `record` is cheap and never waits for the device, so a training loop pays one
call per step boundary and nothing else; `ready` says how many of the pending step ends
have completed (device events are *queried*; only ``final=True`` waits, once, for the
last); `durations` turns completed stamps into step seconds and epoch-second times.

`HostClock` stamps with ``time.perf_counter`` (CPU runs); `EventClock` records device
events of one torch back-end (``torch.cuda``, ``torch.xpu``, ...), so a step's time is
the device's, and the host keeps queueing work. torch is never imported here unless a
benchmark asked for an accelerator (then it is already in its environment).
"""

from __future__ import annotations

import sys
import time
from typing import Any


def loaded_torch() -> Any:
    """The torch module if the benchmark already imported it (never imported here)."""
    return sys.modules.get("torch")


class HostClock:
    """Host wall-clock stamps: a step's end is known as soon as it is stamped.

    ``epoch_offset`` (both clocks): add it to a ``perf_counter`` value to get epoch
    seconds, the time base of every record.
    """

    kind = "cpu"
    on_device = False

    def __init__(self) -> None:
        self.epoch_offset = time.time() - time.perf_counter()

    record = staticmethod(time.perf_counter)

    def ready(self, ends: list[Any], n: int, final: bool) -> int:
        """All of the first ``n`` ends are known."""
        return n

    def durations(self, starts: list[Any], ends: list[Any]) -> tuple[list[float], list[float]]:
        """(seconds of each step, epoch time of each end)."""
        offset = self.epoch_offset
        return [e - s for s, e in zip(starts, ends, strict=False)], [e + offset for e in ends]


class EventClock:
    """Device events of one accelerator back-end (``torch.cuda``, ``torch.xpu``, ...)."""

    on_device = True

    def __init__(self, module: Any, kind: str) -> None:
        self.kind = kind
        self.module = module
        self.Event = module.Event
        self.epoch_offset = time.time() - time.perf_counter()

    def record(self) -> Any:
        event = self.Event(enable_timing=True)
        event.record()
        return event

    def ready(self, ends: list[Any], n: int, final: bool) -> int:
        """How many of the first ``n`` ends the device has passed (a query; ``final``
        waits for the last one instead: the end of a window, once)."""
        if n == 0:
            return 0
        if final:
            ends[n - 1].synchronize()
            return n
        if ends[n - 1].query():
            return n
        lo, hi = 0, n - 1  # events complete in order: find the first one still pending
        while lo < hi:
            mid = (lo + hi) // 2
            if ends[mid].query():
                lo = mid + 1
            else:
                hi = mid
        return lo

    def durations(self, starts: list[Any], ends: list[Any]) -> tuple[list[float], list[float]]:
        """(seconds of each step, epoch time of each end), from completed events."""
        if not ends:
            return [], []
        last = ends[-1]
        now = time.time()  # the last converted event completed at or before now
        durations = [s.elapsed_time(e) / 1000.0 for s, e in zip(starts, ends, strict=False)]
        stamps = [now - e.elapsed_time(last) / 1000.0 for e in ends]
        return durations, stamps


Clock = HostClock | EventClock


def device_kind(device: Any) -> str:
    """``"cpu"``, ``"cuda"``, ``"xpu"``, ... from a string, a torch.device, or None (auto)."""
    if device is None:
        torch = loaded_torch()
        if torch is None:
            return "cpu"
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_available():
            return "cuda"
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and getattr(xpu, "is_available", lambda: False)():
            return "xpu"
        return "cpu"
    kind = getattr(device, "type", None) or str(device)
    return kind.split(":", 1)[0].lower()


def clock_for(kind: str) -> Clock:
    """Device events for an accelerator whose torch back-end has them, else host time."""
    if kind == "cpu":
        return HostClock()
    torch = loaded_torch()
    if torch is None:
        try:
            import torch  # noqa: F811 - the benchmark asked for a device: torch is there
        except ImportError:
            return HostClock()
    module = getattr(torch, "cuda" if kind in ("cuda", "rocm", "hip") else kind, None)
    if module is None or not hasattr(module, "Event"):
        return HostClock()
    return EventClock(module, kind)
