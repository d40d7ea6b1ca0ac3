"""The work one item costs, so that the report can turn items/s into TFLOPS and MFU.

Why a declaration rather than a FLOP counter in the loop: counting every step would add
dispatch overhead to the measurement, and the work per item of a training step does not
change between steps. A benchmark declares it once, before its timed loop, either from
its model's shape (``per_item=...``, e.g. ``6 * parameters * tokens`` for a decoder) or by
counting one real step with ``torch.utils.flop_counter`` (:func:`count_flops`). The
report multiplies the rate (items/s) by the declared FLOPs per item, and divides by the
device's peak for the declared precision (a table in ``config/peaks.yaml``).

The record (a ``data`` event, written by rank 0 only, like every metric record)::

    {"task": "train", "flops_per_item": 3.1e9, "precision": "bf16", "flops_source": "counted"}

``flops_per_item`` are MODEL FLOPs: the work of the model's forward and backward once.
Activation checkpointing runs parts of the forward again during the backward; that
recomputation is work the device does but not work the model needs, so it never counts
in the MFU. A benchmark that counts with checkpointing on declares what the device
executed beside it (``"hardware_flops_per_item"``: the report shows it as HFU), and
:func:`count_and_declare` with ``checkpointing=`` counts both.

``precision`` names the peak the work should be compared with: ``fp32``, ``tf32``,
``fp16``, ``bf16`` or ``fp8`` (``tf32-fp16`` maps to ``fp16``: the matmuls run in fp16).
Standard library at module level (benchkit's rule); torch only inside ``count_flops``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from benchkit.channel import DataWriter, default_writer

#: Peak classes of ``config/peaks.yaml``.
PEAK_CLASSES = ("fp32", "tf32", "fp16", "bf16", "fp8")

# A benchmark's ``--precision`` value -> the peak class its matmuls run at.
_PEAK_CLASS = {
    "fp32": "fp32",
    "tf32": "tf32",
    "fp16": "fp16",
    "bf16": "bf16",
    "fp8": "fp8",
    "tf32-fp16": "fp16",
    "tf32-bf16": "bf16",
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "half": "fp16",
}


def peak_class(precision: str | None) -> str:
    """The peak class of a precision name (``fp32`` when unknown or None)."""
    return _PEAK_CLASS.get((precision or "fp32").lower(), "fp32")


def _is_rank0() -> bool:
    return os.environ.get("RANK", "0") in ("", "0")


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def declare_flops(
    per_item: float,
    *,
    precision: str | None = None,
    source: str = "analytic",
    task: str = "train",
    writer: DataWriter | None = None,
    hardware_per_item: float | None = None,
) -> dict[str, Any] | None:
    """Record the model floating-point operations one item costs (forward + backward for
    a training step, forward only for inference; recomputation excluded) and, when given,
    the hardware FLOPs the device executed for it (``hardware_per_item``: recomputation
    under activation checkpointing included). Returns the record, or None when nothing
    was written (not rank 0, or ``per_item`` is not a positive finite number)."""
    if not _positive(per_item):
        return None
    if not _is_rank0():
        return None
    record = {
        "task": task,
        "flops_per_item": float(per_item),
        "precision": peak_class(precision),
        "flops_source": source,
    }
    if _positive(hardware_per_item) and hardware_per_item != per_item:
        record["hardware_flops_per_item"] = float(hardware_per_item)
    (writer or default_writer()).write(record)
    return record


def count_flops(step: Callable[[], Any]) -> int:
    """FLOPs of one call of ``step`` (e.g. forward + backward of one batch), counted with
    the formulas of ``torch.utils.flop_counter`` (matmuls, convolutions, attention).

    The step really runs: call it before the timed loop and clear the gradients after.
    The counting mode only looks at the operators dispatched (no module hooks, unlike
    ``FlopCounterMode``, whose module tracker breaks models with custom autograd
    functions such as Reformer's reversible layers). Under ``torch.inference_mode`` no
    dispatch mode sees the operators: count inference under ``torch.no_grad``. Returns 0
    when torch has no formulas or saw nothing (then nothing is declared).

    The counter leans on private torch APIs (``torch.utils._python_dispatch``, the
    formulas' signatures): where a torch other than the pinned one differs, the step
    still runs once, uncounted, and one line (`not_counted`) says so: a version
    difference costs the FLOPs, never the run."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils.flop_counter import flop_registry
    except ImportError as exc:
        not_counted(exc)
        step()
        return 0

    try:

        class _Count(TorchDispatchMode):
            total = 0
            failed: BaseException | None = None

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                formula = flop_registry.get(func._overloadpacket)
                if formula is not None and self.failed is None:
                    try:
                        self.total += int(formula(*args, **kwargs, out_val=out))
                    except Exception as exc:  # noqa: BLE001 - a formula of another torch
                        self.failed = exc
                return out

        counter = _Count()
    except Exception as exc:  # noqa: BLE001 - a dispatch-mode API of another torch
        not_counted(exc)
        step()
        return 0
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(counter)
        except Exception as exc:  # noqa: BLE001 - the step runs uncounted
            counter.failed = exc
        step()
    if counter.failed is not None:
        not_counted(counter.failed)
        return 0
    return counter.total


def not_counted(exc: BaseException) -> str:
    """One line on stderr (rank 0): the FLOPs of the step could not be counted with this
    torch, so nothing is declared (no TFLOPS or MFU in the report); returns it."""
    from benchkit.torchsetup import version_cause

    text = f"FLOPs not counted ({version_cause(exc)}); no TFLOPS or MFU for this run"
    if _is_rank0():
        print(text, file=sys.stderr, flush=True)
    return text


def count_and_declare(
    step: Callable[[], Any],
    items: int,
    *,
    precision: str | None = None,
    task: str = "train",
    writer: DataWriter | None = None,
    checkpointing: Callable[[bool], Any] | None = None,
) -> float:
    """Count one step of ``items`` items and declare the per-item model FLOPs; returns
    them (0.0 when nothing could be counted).

    ``checkpointing``: for a model trained with activation checkpointing, the function
    that turns it off (``False``) and back on (``True``). The step is then counted twice:
    without checkpointing (the model FLOPs, declared) and with it (the hardware FLOPs,
    recomputed forwards included, declared beside). The step must do the same work both
    times (seed what it draws at random). Checkpointing is left on."""
    hardware = None
    if checkpointing is not None:
        checkpointing(False)
        try:
            total = count_flops(step)
        finally:
            checkpointing(True)
        hardware = count_flops(step)
    else:
        total = count_flops(step)
    if total <= 0 or items <= 0:
        return 0.0
    per_item = total / items
    declare_flops(
        per_item,
        precision=precision,
        source="counted",
        task=task,
        writer=writer,
        hardware_per_item=None if not hardware else hardware / items,
    )
    return per_item


def count_flops_on_meta(make: Callable[[], Any], *, precision: str | None = None) -> int:
    """FLOPs of one step of the `benchkit.memory.Workload` that ``make`` builds on the
    meta device, counted without running it (any size: a 70B model costs nothing): the
    step runs on meta tensors (`benchkit.memory.as_fake_cpu`) under the autocast of
    ``precision``, with attention in its plain form (two matmuls, which the counter
    sees; fused CPU kernels it does not); a deep stack is counted on shallow copies
    (`benchkit.memory.by_depth`). What the tests compare analytic formulas with."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from benchkit.memory import AMP_DTYPES, as_fake_cpu, by_depth

    name = AMP_DTYPES.get(precision or "")
    amp = getattr(torch, name) if name else None

    def counted(work: Any) -> dict[str, int]:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        as_fake_cpu([*work.trained, *work.frozen], mode)
        with mode, sdpa_kernel(SDPBackend.MATH):

            def step() -> None:
                with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
                    work.step()

            return {"flops": count_flops(step)}

    return by_depth(make(), counted)["flops"]
