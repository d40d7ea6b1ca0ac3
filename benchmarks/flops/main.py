"""Matrix-multiply throughput of one dtype, in TFLOPS.

Why a matmul loop: it is the peak that every other benchmark is bounded by, so it is the
first number to look at when a training benchmark looks slow. Each timed step runs
``--repeat`` multiplications of ``m x k`` by ``k x n`` matrices, and the step's "batch
size" is the work it did in tera floating-point operations (``2*m*n*k*repeat / 1e12``),
so the rate that `benchkit.timing.TimedIterator` reports is directly TFLOPS.

Before timing, a golden check (`benchkit.golden`) runs the same ``torch.matmul`` once on
fixed 256 x 256 inputs in the bench's dtype and precision settings and compares it with
float64 on the CPU: one ``golden`` record, which fails the report's ``golden`` layer when
the error is above the dtype's tolerance (a device that is fast but wrong). ``--golden
off`` skips it; ``--golden-perturb EPS`` (a test flag, not in ``--help``) scales the
device output by ``1 + EPS`` before the comparison, so that a test can make it fail.

Runs by hand too: ``python main.py --dtype bf16``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import time

import torch

from benchkit import golden
from benchkit.exiting import run_and_exit
from benchkit.flops import declare_flops
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, setup

DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp64": torch.float64,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument(
        "--size", type=int, default=None, help="m = n = k (default: 1024 on cpu, 8192 else)"
    )
    parser.add_argument(
        "--repeat", type=int, default=None, help="matmuls per timed step (default: ~50 ms of work)"
    )
    parser.add_argument("--step-ms", type=float, default=50.0, help="target step time for --repeat")
    golden.add_arguments(parser)
    add_common_arguments(parser, precisions=None, seed=False)  # --dtype is the precision
    return parser.parse_args(argv)


def configure_precision(dtype_name: str, device: str) -> None:
    """fp32 must mean real fp32: TF32 tensor cores are only allowed for ``tf32``."""
    allow = dtype_name == "tf32"
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow
    torch.set_float32_matmul_precision("high" if allow else "highest")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def calibrate_repeat(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, target_s: float) -> int:
    """Matmuls per step so that a step lasts about ``target_s``.

    Steps far shorter than that (a few ms on a fast GPU) would make the per-step timing
    noise and the loop overhead part of the number; far longer steps waste the budget.
    """
    with torch.no_grad():
        for _ in range(2):  # first calls pay for allocation and kernel selection
            torch.matmul(a, b, out=out)
        _sync(a.device)
        n, start = 0, time.perf_counter()
        while n < 3 or time.perf_counter() - start < min(target_s, 0.2):
            torch.matmul(a, b, out=out)
            n += 1
            if a.device.type != "cpu" and n % 8 == 0:
                _sync(a.device)
        _sync(a.device)
        per_call = (time.perf_counter() - start) / n
    return max(1, math.ceil(target_s / per_call))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = setup(args).device
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    configure_precision(args.dtype, device.type)
    on_cpu = device.type == "cpu"
    size = args.size or (1024 if on_cpu else 8192)
    dtype = DTYPES[args.dtype]
    if args.golden == "on":  # the timed op, same dtype and TF32 settings, vs float64 on cpu
        check = golden.check_matmul(device, args.dtype, dtype, perturb=args.golden_perturb)
        golden.write(check)
        print(golden.describe(check), flush=True)

    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    out = torch.empty(size, size, device=device, dtype=dtype)
    repeat = args.repeat or calibrate_repeat(a, b, out, args.step_ms / 1000)
    tflop_per_step = 2.0 * size**3 * repeat / 1e12
    print(
        f"flops: {args.dtype} {size}x{size} x{repeat} per step on {device}, "
        f"{torch.get_num_threads()} threads (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})",
        flush=True,
    )

    # The rate is already in TFLOPS: one "item" is one TFLOP, so the report's TFLOPS equal
    # the rate and its MFU is the fraction of the device's peak for this dtype.
    declare_flops(1e12, precision=args.dtype, source="analytic")
    steps = TimedIterator(
        itertools.count(),
        batch_size_fn=lambda _step: tflop_per_step,
        device=device,
        units="Tflops",
    )
    with torch.no_grad():
        for _step in steps:
            for _ in range(repeat):
                torch.matmul(a, b, out=out)


if __name__ == "__main__":
    run_and_exit(main)
