"""Operator micro-benchmarks: latency percentiles and throughput of single torch operators.

Why: an end-to-end training number can hide a regression in one operator for a long time
(a slow backward for one input shape, a dtype without a fast kernel). Each run measures
one operator family (``--op``) over a matrix of cases: shapes (``small``, ``large``, and
``skewed``, where one dimension dwarfs the other), dtypes, and modes (``fwd``, and
``fwdbwd`` where a gradient exists).

How it measures:

1. calibration: each case gets a repeat count ``k`` so that ``k`` calls last about
   ``--case-ms``, or ``--round-ms`` shared by all cases (small operators are called many
   times, large ones a few);
2. rounds: one round runs every case ``k`` times, timing every call (``perf_counter`` on
   CPU; device events on accelerators, converted after the round so that nothing
   synchronises between calls). Rounds go through `benchkit.timing.TimedIterator`; the
   scored ``train`` rate of a round is the **geometric mean over cases of the per-case
   call rates** (calls/s) in that round. Why not total calls / round time: that figure is
   dominated by whichever tiny cases got the largest ``k``, and ``k`` comes from a noisy
   calibration, so it moved by up to 20% between runs while every per-case rate agreed
   within a few percent (and it weighted the cases differently on every machine). The
   geometric mean gives every case the same weight, does not depend on ``k`` and is the
   usual way to summarise a set of heterogeneous micro-benchmarks;
3. at the end, one record per case (warm-up rounds excluded): ``task`` =
   ``<op>.<variant>.<shape>.<dtype>.<mode>``, ``rate`` in calls/s, ``latency_ms`` with
   p50/p90/p99 and the mean, and ``elements/s`` of the input.

Before calibrating, a golden check (`benchkit.golden`, `golden_checks`) runs each timed
variant x dtype x mode once on a small fixed input and compares it (output, and input
gradients in ``fwdbwd``) with float64 on the CPU: one ``golden`` record each, which fail
the report's ``golden`` layer when out of tolerance. ``--golden off`` skips them;
``--golden-perturb EPS`` (a test flag, not in ``--help``) scales the device results by
``1 + EPS`` before the comparison, so that a test can make the check fail.

Runs by hand too: ``python main.py --op softmax``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from benchkit import golden
from benchkit.channel import default_writer
from benchkit.exiting import run_and_exit
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, setup

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
OPS = ("matmul", "conv2d", "softmax", "layernorm", "embedding", "reduce", "elementwise")

# Shapes per operator: (cpu, accelerator). Skewed shapes stress the kernels' handling of
# a tiny inner or outer dimension (e.g. a reduction over 16 elements, 16384 times).
SHAPES: dict[str, dict[str, tuple[tuple, tuple]]] = {
    "matmul": {  # (m, k, n)
        "small": ((64, 64, 64), (256, 256, 256)),
        "large": ((512, 512, 512), (4096, 4096, 4096)),
        "skewed": ((4096, 32, 256), (65536, 64, 1024)),
    },
    "conv2d": {  # (batch, channels in, size, channels out), 3x3 kernel, padding 1
        "small": ((4, 16, 16, 16), (32, 64, 32, 64)),
        "large": ((8, 64, 32, 64), (64, 256, 56, 256)),
        "skewed": ((1, 3, 128, 32), (32, 3, 224, 64)),
    },
    "softmax": {  # (rows, columns), along the columns
        "small": ((64, 128), (256, 1024)),
        "large": ((256, 4096), (4096, 16384)),
        "skewed": ((16384, 16), (1048576, 16)),
    },
    "layernorm": {  # (rows, normalised size)
        "small": ((64, 128), (256, 1024)),
        "large": ((256, 4096), (4096, 16384)),
        "skewed": ((16384, 16), (1048576, 16)),
    },
    "embedding": {  # (vocabulary, dim, looked-up indices)
        "small": ((1000, 64, 256), (10000, 256, 4096)),
        "large": ((50000, 256, 8192), (250000, 1024, 65536)),
        "skewed": ((100, 1024, 16384), (1000, 8192, 131072)),
    },
    "reduce": {  # (rows, columns), along the columns
        "small": ((64, 64), (256, 1024)),
        "large": ((1024, 1024), (8192, 8192)),
        "skewed": ((16, 65536), (16, 16777216)),
    },
    "elementwise": {  # (rows, columns)
        "small": ((64, 64), (256, 1024)),
        "large": ((1024, 1024), (8192, 8192)),
        "skewed": ((65536, 4), (16777216, 4)),
    },
}


@dataclass
class Case:
    """One operator call to time: ``fn()`` runs it (with its backward in ``fwdbwd``)."""

    name: str
    fn: Callable[[], object]
    elements: int  # elements of the main input, for elements/s
    repeat: int = 1
    samples: list[float] = field(default_factory=list)  # seconds per call


def _leaf(shape: tuple, dtype: torch.dtype, device: torch.device, grad: bool) -> torch.Tensor:
    return torch.randn(*shape, device=device).to(dtype).requires_grad_(grad)


def operator(op: str, variant: str, shape: tuple) -> tuple[Callable, list[tuple], int]:
    """(function of the inputs, the inputs, index of the main input) of one operator.

    An input is a float tensor shape, or ``("index", high, n)`` for ``n`` indices below
    ``high``. The timed cases (`_forward`) and the golden check (`golden_checks`) call
    the same function, so the check judges exactly the operator that is timed.
    """
    if op == "matmul":
        m, k, n = shape
        return (lambda a, b: a @ b), [(m, k), (k, n)], 0
    if op == "conv2d":
        batch, cin, size, cout = shape
        return (
            (lambda x, w: F.conv2d(x, w, padding=1)),
            [(batch, cin, size, size), (cout, cin, 3, 3)],
            0,
        )
    if op == "softmax":
        return (lambda x: torch.softmax(x, dim=-1)), [shape], 0
    if op == "layernorm":
        norm = shape[-1:]
        return (lambda x, w, b: F.layer_norm(x, norm, w, b)), [shape, norm, norm], 0
    if op == "embedding":
        vocab, dim, n = shape
        return (lambda table, idx: F.embedding(idx, table)), [(vocab, dim), ("index", vocab, n)], 1
    if op == "reduce":
        if variant == "amax":
            return (lambda x: x.amax(dim=-1)), [shape], 0
        return (lambda x: x.sum(dim=-1)), [shape], 0
    if op == "elementwise":
        if variant == "gelu":
            return (lambda x, y: F.gelu(x)), [shape, shape], 0
        return (lambda x, y: x * y + x), [shape, shape], 0
    raise ValueError(f"unknown operator {op!r}")


def _forward(op: str, variant: str, shape: tuple, dtype, device, grad: bool):
    """(callable computing the output, main input) for one operator and shape."""
    fn, specs, main = operator(op, variant, shape)
    inputs = [
        torch.randint(0, spec[1], (spec[2],), device=device)
        if spec[0] == "index"
        else _leaf(spec, dtype, device, grad)
        for spec in specs
    ]
    return (lambda: fn(*inputs)), inputs[main]


VARIANTS = {"reduce": ("sum", "amax"), "elementwise": ("muladd", "gelu")}


def build_cases(
    op: str, shapes: list[str], dtypes: list[str], modes: list[str], device
) -> list[Case]:
    cases = []
    accel = 0 if device.type == "cpu" else 1
    for variant, shape_name, dtype_name, mode in itertools.product(
        VARIANTS.get(op, (op,)), shapes, dtypes, modes
    ):
        if op == "embedding" and mode == "fwdbwd" and dtype_name == "fp16" and device.type == "cpu":
            continue  # no CPU fp16 embedding backward kernel
        shape = SHAPES[op][shape_name][accel]
        grad = mode == "fwdbwd"
        fwd, main_input = _forward(op, variant, shape, DTYPES[dtype_name], device, grad)
        if grad:

            def fn(fwd=fwd):
                out = fwd()
                out.backward(torch.ones_like(out))
        else:

            def fn(fwd=fwd):
                with torch.no_grad():
                    return fwd()

        name = ".".join(
            [op] + ([variant] if variant != op else []) + [shape_name, dtype_name, mode]
        )
        cases.append(Case(name, fn, main_input.numel()))
    return cases


def golden_checks(
    op: str, dtypes: list[str], modes: list[str], device, perturb: float = 0.0
) -> list[dict]:
    """One `benchkit.golden` check per variant, dtype and mode the run times.

    Each runs the timed operator once on its ``small`` CPU shape (fixed inputs, whatever
    the device) in the case's dtype, and compares with float64 on the CPU: the output in
    ``fwd``, the output and every input's gradient in ``fwdbwd`` (for a fixed random
    upstream gradient). Small shapes keep the whole family under ~0.1 s.
    """
    results = []
    for variant, dtype_name, mode in itertools.product(VARIANTS.get(op, (op,)), dtypes, modes):
        if op == "embedding" and mode == "fwdbwd" and dtype_name == "fp16" and device.type == "cpu":
            continue  # no CPU fp16 embedding backward kernel (not timed either)
        fn, specs, _main = operator(op, variant, SHAPES[op]["small"][0])
        gen = torch.Generator().manual_seed(golden.SEED)
        inputs = [
            torch.randint(0, spec[1], (spec[2],), generator=gen)
            if spec[0] == "index"
            else golden.randn(*spec, seed=golden.SEED + i)
            for i, spec in enumerate(specs)
        ]
        name = ".".join([op] + ([variant] if variant != op else []) + [mode])
        results.append(
            golden.check(
                name,
                dtype_name,
                fn,
                inputs,
                device=device,
                torch_dtype=DTYPES[dtype_name],
                backward=mode == "fwdbwd",
                perturb=perturb,
            )
        )
    return results


class CallTimer:
    """Per-call durations: host clock on CPU, device events elsewhere (read after a round)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.events = device.type == "cuda"
        self.pending: list[tuple[Case, object, object]] = []

    def run(self, case: Case) -> None:
        if self.events:
            for _ in range(case.repeat):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                case.fn()
                end.record()
                self.pending.append((case, start, end))
        else:
            clock = time.perf_counter
            samples = case.samples
            for _ in range(case.repeat):
                t0 = clock()
                case.fn()
                samples.append(clock() - t0)

    def collect(self) -> None:
        if self.pending:
            torch.cuda.synchronize(self.device)
            for case, start, end in self.pending:
                case.samples.append(start.elapsed_time(end) / 1000.0)
            self.pending.clear()


def calibrate(cases: list[Case], case_s: float, device: torch.device) -> None:
    """Set each case's repeat count so that one round of it lasts about ``case_s``."""
    for case in cases:
        for _ in range(2):
            case.fn()  # first calls pay for allocation and kernel choice
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        n, start = 0, time.perf_counter()
        while n < 2 or time.perf_counter() - start < case_s:
            case.fn()
            n += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        per_call = (time.perf_counter() - start) / n
        case.repeat = max(1, min(10_000, math.ceil(case_s / per_call)))


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` in [0, 100] of already sorted values."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def case_record(case: Case) -> dict:
    values = sorted(case.samples)
    mean = sum(values) / len(values)
    return {
        "task": case.name,
        "rate": 1.0 / mean,
        "units": "calls/s",
        "elements_per_s": case.elements / mean,
        "latency_ms": {
            "p50": percentile(values, 50) * 1e3,
            "p90": percentile(values, 90) * 1e3,
            "p99": percentile(values, 99) * 1e3,
            "mean": mean * 1e3,
        },
        "calls": len(values),
        "time": time.time(),
    }


class RoundSize:
    """The "batch size" of one round, known only once the round ran.

    `TimedIterator` reports ``size / duration`` and reads sizes with ``float()`` at its
    next flush, after the round. Setting ``value = G * round_seconds`` (``G``: geometric
    mean of the round's per-case call rates, ``round_seconds``: the round as timed here,
    which is the iterator's own interval up to the loop's bookkeeping) makes the reported
    rate ``G``, while the budget, warm-up, progress and stop logic stay the iterator's.
    """

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = math.nan

    def __float__(self) -> float:
        return self.value


class RoundWork:
    """Hands `TimedIterator` one `RoundSize` per round and fills it after the round."""

    def __init__(self) -> None:
        self.current = RoundSize()

    def next_round(self, _index: int) -> RoundSize:
        self.current = RoundSize()
        return self.current

    def finish(self, cases: list[Case], marks: list[int], seconds: float) -> None:
        self.current.value = geometric_mean_rate(cases, marks) * seconds


def geometric_mean_rate(cases: list[Case], marks: list[int]) -> float:
    """Geometric mean over cases of calls/s, from the samples added since ``marks``."""
    logs = []
    for case, mark in zip(cases, marks, strict=True):
        new = case.samples[mark:]
        spent = sum(new)
        if not new or spent <= 0:
            return math.nan
        logs.append(math.log(len(new) / spent))
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def positive_ms(text: str) -> float:
    """A duration in milliseconds that must be > 0 (0 or less would time nothing)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of milliseconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 ms, got {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=OPS, required=True)
    parser.add_argument("--shapes", default="small,large,skewed")
    parser.add_argument(
        "--dtypes", default=None, help="default: fp32,bf16 on cpu, fp32,fp16,bf16 else"
    )
    parser.add_argument("--modes", default="fwd,fwdbwd")
    parser.add_argument("--case-ms", type=positive_ms, default=2.0, help="time per case per round")
    parser.add_argument(
        "--round-ms",
        type=positive_ms,
        default=None,
        help="time per round, shared by the cases (wins over --case-ms): every operator "
        "family then has rounds of the same length whatever its number of cases",
    )
    golden.add_arguments(parser)
    add_common_arguments(parser, precisions=None)  # --dtypes: one case per dtype
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = setup(args).device
    dtypes = (args.dtypes or ("fp32,bf16" if device.type == "cpu" else "fp32,fp16,bf16")).split(",")
    modes = args.modes.split(",")
    writer = default_writer()
    if args.golden == "on":  # the timed operators vs float64 on cpu (`golden_checks`)
        checks = golden_checks(args.op, dtypes, modes, device, args.golden_perturb)
        for payload in checks:
            writer.write(golden.record(payload))
            if not payload["passed"]:
                print(golden.describe(payload), flush=True)
        writer.flush()
        failed = sum(not c["passed"] for c in checks)
        print(f"golden: {len(checks)} checks, {failed} out of tolerance", flush=True)
    cases = build_cases(args.op, args.shapes.split(","), dtypes, modes, device)
    case_ms = args.case_ms if args.round_ms is None else args.round_ms / len(cases)
    calibrate(cases, case_ms / 1000.0, device)
    calls_per_round = sum(c.repeat for c in cases)
    print(
        f"opbench: {args.op}, {len(cases)} cases, {calls_per_round} calls per round on {device}, "
        f"{torch.get_num_threads()} threads",
        flush=True,
    )

    timer = CallTimer(device)
    work = RoundWork()
    rounds = TimedIterator(
        itertools.count(), batch_size_fn=work.next_round, device=device, units="calls/s"
    )
    for index in rounds:
        if index == rounds.skip:
            for case in cases:  # warm-up rounds do not count in the latencies either
                case.samples.clear()
        marks = [len(case.samples) for case in cases]
        start = time.perf_counter()
        for case in cases:
            timer.run(case)
        timer.collect()
        work.finish(cases, marks, time.perf_counter() - start)

    for case in cases:
        if case.samples:
            writer.write(case_record(case))
    writer.flush()


if __name__ == "__main__":
    run_and_exit(main)
