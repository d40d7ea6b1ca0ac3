"""Golden outputs: is the operation a benchmark times computing the right numbers?

Before its timed loop a benchmark runs the exact operation it times once, on a fixed
small input drawn in float64 from a private seeded generator and rounded to its dtype,
and compares the device's result with the same operation in float64 on the CPU on the
rounded inputs. The error is ``max |out - ref| / (max |ref| + tiny)``; the check passes
when it is within the dtype's tolerance (`TOLERANCES`), and one record ``{"task":
"golden", "golden": {"name", "dtype", "max_rel_error", "tolerance", "passed",
"reference"}}`` goes to the data channel, which the report's ``golden`` validation layer
reads. The test flag ``--golden-perturb EPS`` (hidden from ``--help``) scales the device
output by ``1 + EPS`` first. Why this error measure and these tolerances:
docs/reports.md "Golden checks".

Only the standard library is imported here (benchkit's rule); torch inside functions.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

#: Largest ``max |out - ref| / max |ref|`` accepted per dtype (docs/reports.md "Golden checks").
TOLERANCES = {"fp64": 1e-12, "fp32": 1e-5, "tf32": 5e-3, "fp16": 1e-2, "bf16": 5e-2}
REFERENCE = "float64 on cpu"
SEED = 1234
TINY = 1e-300  # keeps an all-zero reference from dividing by zero

_DTYPE_NAMES = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--golden on|off`` and the hidden test flag ``--golden-perturb EPS``."""
    parser.add_argument(
        "--golden",
        choices=("on", "off"),
        default="on",
        help="check the timed operation once against a float64 CPU reference before "
        "timing (default: on)",
    )
    parser.add_argument("--golden-perturb", type=float, default=0.0, help=argparse.SUPPRESS)


def tolerance(dtype_name: str) -> float:
    """The tolerance of a dtype name (``fp32``, ``bf16``, ``tf32``...)."""
    try:
        return TOLERANCES[dtype_name]
    except KeyError:
        raise ValueError(f"no golden tolerance for dtype {dtype_name!r}") from None


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``bf16`` (TF32 is a setting, not a dtype: name it yourself)."""
    return _DTYPE_NAMES.get(str(dtype).removeprefix("torch."), str(dtype))


def max_rel_error(out: Any, ref: Any) -> float:
    """``max |out - ref| / (max |ref| + tiny)``, computed in float64 on the CPU.

    NaN or infinite outputs give ``inf`` (never a pass); a shape mismatch raises.
    """
    import torch

    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if o.shape != r.shape:
        raise ValueError(f"golden: output shape {tuple(o.shape)} != reference {tuple(r.shape)}")
    if o.numel() == 0:
        return 0.0
    if not bool(torch.isfinite(o).all()):
        return math.inf
    return float((o - r).abs().max()) / (float(r.abs().max()) + TINY)


def result(name: str, dtype: str, error: float, tol: float | None = None) -> dict:
    """The ``golden`` payload of one check."""
    tol = tolerance(dtype) if tol is None else tol
    return {
        "name": name,
        "dtype": dtype,
        "max_rel_error": error,
        "tolerance": tol,
        "passed": bool(error <= tol),
        "reference": REFERENCE,
    }


def check(
    name: str,
    dtype: str,
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    device: Any,
    torch_dtype: Any,
    backward: bool = False,
    perturb: float = 0.0,
    seed: int = SEED,
) -> dict:
    """Run ``fn(*inputs)`` on ``device`` in ``torch_dtype`` and against float64 on CPU.

    ``inputs``: float64 CPU tensors (rounded to ``torch_dtype`` for the device; integer
    tensors, such as indices, are only moved). ``backward``: also compare the gradients
    of the floating inputs for a random upstream gradient (a fixed one: ``ones`` makes
    the gradient of a softmax exactly zero, and relative errors meaningless). The error
    is the largest over the output and the gradients, each on its own scale.
    """
    import torch

    dev_in, ref_in = [], []
    for x in inputs:
        if x.is_floating_point():
            low = x.to(torch_dtype)
            ref_in.append(low.to(torch.float64).requires_grad_(backward))
            dev_in.append(low.to(device).requires_grad_(backward))
        else:
            dev_in.append(x.to(device))
            ref_in.append(x)
    out = fn(*dev_in)
    ref = fn(*ref_in)
    pairs = [(out, ref)]
    if backward:
        gen = torch.Generator().manual_seed(seed + 1)
        upstream = torch.randn(ref.shape, generator=gen, dtype=torch.float64).to(torch_dtype)
        out.backward(upstream.to(device))
        ref.backward(upstream.to(torch.float64))
        pairs += [
            (d.grad, r.grad) for d, r in zip(dev_in, ref_in, strict=True) if r.grad is not None
        ]
    error = 0.0
    for o, r in pairs:
        o = o.detach().to("cpu", torch.float64)
        if perturb:
            o = o * (1.0 + perturb)
        error = max(error, max_rel_error(o, r))
    return result(name, dtype, error)


def randn(*shape: int, seed: int = SEED) -> Any:
    """Standard normal float64 CPU tensor from a private generator (fixed input)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def check_matmul(
    device: Any,
    dtype: str,
    torch_dtype: Any,
    *,
    size: int = 256,
    perturb: float = 0.0,
    seed: int = SEED,
) -> dict:
    """``torch.matmul(a, b, out=...)`` of ``size x size`` matrices (what `flops` times)."""
    import torch

    def matmul(a, b):
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        return torch.matmul(a, b, out=out)

    a, b = randn(size, size, seed=seed), randn(size, size, seed=seed + 7)
    return check(
        "matmul", dtype, matmul, [a, b], device=device, torch_dtype=torch_dtype, perturb=perturb
    )


def record(payload: dict) -> dict:
    """The data-channel record of one check."""
    return {"task": "golden", "golden": payload, "time": time.time()}


def write(payload: dict, writer: Any = None) -> None:
    """Write the record (flushed at once: a crash later must not lose it) and say so."""
    if writer is None:
        from benchkit.channel import default_writer

        writer = default_writer()
    writer.write(record(payload))
    writer.flush()


def describe(payload: dict) -> str:
    """One line for the benchmark's output: ``golden matmul fp32: ok (max relative ...)``."""
    verdict = "ok" if payload["passed"] else "FAILED"
    cmp = "<=" if payload["passed"] else ">"
    tol = payload["tolerance"]
    return (
        f"golden {payload['name']} {payload['dtype']}: {verdict} (max relative error "
        f"{fmt_error(payload['max_rel_error'], tol)} {cmp} tolerance {fmt_tolerance(tol)}"
        f", reference {payload.get('reference', REFERENCE)})"
    )


def fmt_error(error: float, tol: float | None = None) -> str:
    """``3.1e-02``; more digits when rounding would make a failure read as the tolerance
    (``5.040e-02``, not ``5.0e-02 > tolerance 5e-02``)."""
    text = f"{error:.1e}"
    if tol is not None and math.isfinite(error) and error > tol and float(text) <= tol:
        text = f"{error:.3e}"
    return text


def fmt_tolerance(tol: float | None) -> str:
    """``1e-05``, ``5e-03``; two digits when one would change the value; ``?`` if unknown."""
    if tol is None:
        return "?"
    short = f"{tol:.0e}"
    return short if float(short) == tol else f"{tol:.1e}"
