"""What PyTorch's caching allocator held on the process's device, recorded once.

The report's peak accelerator memory (`peak_memory`) is NVML's "used", as upstream
milabench records it: the CUDA context plus everything the caching allocator has
*reserved*. The start-up estimate (`benchkit.memory`, the report's `memory_estimate`)
predicts the tensors plus an allowance for the context. When the two differ, torch's own
peaks say why: ``max_memory_allocated`` (the tensors at their largest) near the
estimate with ``max_memory_reserved`` near NVML's figure means the allocator kept more
than the tensors needed (fragmentation under variable shapes, cuDNN workspaces); an
allocated peak above the estimate means the estimate missed tensors.

The record (a ``data`` event; every process writes its own, rank 0 or not, since each
rank has its own device), in MiB (2**20 bytes) as ``gpudata``'s memory::

    {"task": "train", "time": 1795311510.9, "torch_memory": {"device": 0, "rank": 0,
     "max_allocated": 15974.2, "max_reserved": 16020.0, "alloc_retries": 0, "ooms": 0}}

``alloc_retries`` (the allocator freed its cache and retried a failed ``cudaMalloc``)
and ``ooms`` come from ``memory_stats()`` and are left out where it lacks them.
`benchkit.timing.TimedIterator` writes it when its window ends, before the ``stop``
event (the runner ends a stopped process after a short grace, so nothing may wait for
the exit), or when its loop closes; once per process. Nothing is written on the CPU,
without torch, or for a device torch never initialised in this process. Every torch
call is guarded: a torch whose API differs costs the figure, never the run. Standard
library at module level (benchkit's rule): torch is read from ``sys.modules``, never
imported here.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from benchkit.channel import DataWriter, default_writer
from benchkit.clock import device_kind

MIB = 2**20

# ``memory_stats()`` counters copied into the record, under shorter names.
_COUNTERS = (("num_alloc_retries", "alloc_retries"), ("num_ooms", "ooms"))

_recorded = False  # once per process: the first window to end writes the record


def accelerator_module(kind: str) -> Any:
    """``torch.cuda`` (CUDA and ROCm) or ``torch.<kind>`` (``xpu``, ...) of the loaded
    torch; None for the CPU, when torch was never imported, or without that back-end."""
    torch = sys.modules.get("torch")
    if torch is None or kind in ("cpu", "meta"):
        return None
    return getattr(torch, "cuda" if kind in ("cuda", "rocm", "hip") else kind, None)


def device_index(device: Any) -> int | None:
    """The index of ``cuda:1``, ``torch.device("cuda", 1)`` or ``1``; None for a device
    without one (``"cuda"``, None: the current device)."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    index = getattr(device, "index", None)
    if isinstance(index, int):
        return index
    _, sep, tail = str(device or "").partition(":")
    return int(tail) if sep and tail.isdigit() else None


def peak_memory(device: Any) -> dict[str, Any] | None:
    """torch's figures for ``device`` (a name, a ``torch.device`` or None for the one
    torch guesses): ``{"device", "max_allocated", "max_reserved"}`` in MiB, plus
    ``alloc_retries`` and ``ooms`` where ``memory_stats()`` has them.

    None on the CPU, without torch, where the back-end lacks these functions, where the
    device was never initialised in this process (nothing is initialised here: asking
    would create a context) or reserved nothing, and when any call raises."""
    module = accelerator_module(device_kind(device))
    if module is None:
        return None
    try:
        if not module.is_available():
            return None
        initialised = getattr(module, "is_initialized", None)
        if initialised is not None and not initialised():
            return None
        index = device_index(device)
        if index is None:
            index = int(module.current_device())
        allocated = float(module.max_memory_allocated(index))
        reserved = float(module.max_memory_reserved(index))
    except Exception:  # noqa: BLE001 - a torch that differs costs the figure, not the run
        return None
    if not (math.isfinite(reserved) and reserved > 0 and math.isfinite(allocated)):
        return None
    figures: dict[str, Any] = {
        "device": index,
        "max_allocated": allocated / MIB,
        "max_reserved": reserved / MIB,
    }
    figures.update(counters(module, index))
    return figures


def counters(module: Any, index: int) -> dict[str, int]:
    """``alloc_retries`` and ``ooms`` of ``module.memory_stats(index)``, those it has;
    {} where the call is missing or raises (the peaks are kept without them)."""
    try:
        stats = module.memory_stats(index)
    except Exception:  # noqa: BLE001 - the counters are a bonus
        return {}
    found = {}
    for key, name in _COUNTERS:
        value = stats.get(key) if hasattr(stats, "get") else None
        if isinstance(value, int) and not isinstance(value, bool):
            found[name] = value
    return found


def memory_record(figures: dict[str, Any], *, task: str = "train", rank: int = 0) -> dict:
    """The ``data`` record of `peak_memory`'s ``figures`` (see the module's docstring)."""
    return {"task": task, "time": time.time(), "torch_memory": {**figures, "rank": rank}}


def record_peak_memory(
    device: Any, *, writer: DataWriter | None = None, task: str = "train", rank: int = 0
) -> dict | None:
    """Write this process's `memory_record` of ``device`` on ``writer`` (None: the
    process-wide one) and flush it, the first time there are figures to write.

    Returns the record, or None when nothing was written: already written in this
    process, or `peak_memory` had nothing (the CPU, no torch, a device never used).
    Never raises: the figure is a diagnosis, never a reason to fail a run."""
    global _recorded
    if _recorded:
        return None
    try:
        figures = peak_memory(device)
        if figures is None:
            return None
        record = memory_record(figures, task=task, rank=rank)
        out = writer if writer is not None else default_writer()
        out.write(record)
        out.flush()
    except Exception:  # noqa: BLE001 - never turn the end of a window into a failure
        return None
    _recorded = True
    return record
