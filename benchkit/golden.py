"""Golden outputs: is the operation a benchmark times computing the right numbers?

A device, driver or library can be fast because it is wrong (a kernel that skips work, a
matmul that silently runs in TF32 or bf16 when asked for fp32, a broken reduction). A
throughput number cannot tell; a deterministic check can. Before its timed loop a
benchmark runs the exact operation it times once, on a fixed small input, and compares:

* **input**: drawn in float64 on the CPU from a private generator with a fixed seed (the
  global random state of the benchmark is not touched), then rounded to the benchmark's
  dtype and moved to its device;
* **device result**: the operation on the device, in that dtype, under the benchmark's
  own precision settings (TF32 flags included);
* **reference**: the same operation in float64 on the CPU, on the *rounded* inputs
  upcast to float64. Rounding the inputs to bf16 is the benchmark's choice, not the
  device's error: only what the device computes from those inputs is judged;
* **error**: ``max |out - ref| / (max |ref| + tiny)`` (`max_rel_error`), in float64.
  Why not an element-wise relative error: outputs of a matmul or a gradient cross zero,
  and an entry near zero has a huge relative error for a correct result (cancellation).
  Why not the norm ratio ``||out - ref|| / ||ref||``: it averages, so one wrong tile of a
  tiled kernel (a quarter of a row block, say) is diluted by the square root of its
  share of the output; the max-norm ratio sees the worst entry at full size, still on
  the scale of the output;
* **verdict**: error <= the tolerance of the dtype (`TOLERANCES`), written as one record
  ``{"task": "golden", "golden": {"name", "dtype", "max_rel_error", "tolerance",
  "passed", "reference"}}`` on the data channel; the report's ``golden`` validation
  layer fails the run when any record says ``passed: false``.

Tolerances (`TOLERANCES`), for the sizes used here: a matmul with inner dimension
``k = 256`` of standard normal inputs, so entries of the result are about N(0, k) and
``max |ref|`` is about ``4 sqrt(k) = 64``; the other operators reduce over at most a
few hundred elements too. ``u`` is the unit roundoff of the format that rounds.

* ``fp64`` 1e-12: u = 1.1e-16; even the worst-case bound of a dot product,
  ``k u |A||B|`` (|A||B| entries ~ 0.64 k = 163), is 7e-14 of ``max |ref|``.
* ``fp32`` 1e-5: u = 6e-8; a real fp32 matmul lands around 1e-7 to 1e-6 (rounding errors
  of a k-term sum grow like ``sqrt(k) u``), its worst-case bound is ~4e-5 and is never
  approached with random signs. What must fail is an "fp32" that is secretly TF32 or
  bf16: their input rounding alone gives 1e-4 to 1e-3 here, 10x to 100x above.
* ``tf32`` 5e-3: the kernel rounds the fp32 inputs to a 10-bit mantissa (u = 4.9e-4):
  each product is off by ~u, the k errors add like a random walk, ``u sqrt(k) / 4 sqrt(k)``
  ~ 1e-4 on average and ~5e-4 at the worst of 65536 entries; 10x margin above that.
* ``fp16`` 1e-2: u = 4.9e-4 for the output rounding (fp32 accumulation, the usual case:
  ~5e-4); a library that accumulates in fp16 adds ``u sqrt(k)`` per entry, ~1.5e-3 of
  the max. A wrong kernel (skipped block, wrong tile) errs by O(1): far above.
* ``bf16`` 5e-2: u = 3.9e-3 (8-bit mantissa): output rounding 2e-3, accumulation in bf16
  (some CPU paths) ~1e-2 of the max; 5e-2 keeps 5x above that and 20x below an O(1)
  mistake.

The test flag ``--golden-perturb EPS`` of the benchmarks (hidden from ``--help``) scales
the device output by ``1 + EPS`` before the comparison, which adds a relative error of
EPS: tests use it to make the check fail for real.

Only the standard library is imported here (benchkit's rule); torch inside functions.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

#: Largest ``max |out - ref| / max |ref|`` accepted per dtype name (reasons above).
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
