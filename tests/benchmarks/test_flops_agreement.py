"""The analytic FLOPs of the transformer entries agree with the counted ones, at the entries'
own shapes: each model is built on the meta device and one step of the configured batch is
counted there by `benchkit.flops.count_flops_on_meta` (no compute: the 70B entries cost
seconds), then compared with the formula the benchmark uses or offers, within 5%. The
counts are of model FLOPs: activation checkpointing off; turned on, the count grows by the
recomputed forwards (the hardware FLOPs dinov2 and vjepa declare beside their model
FLOPs)."""

from __future__ import annotations

import copy
import sys

import pytest
from needs import needs

from benchkit.flops import count_flops_on_meta
from benchkit.memory import load_footprint, sibling_main

from .conftest import BENCHMARKS
from .test_memory_estimates import jobs

needs("transformers")
needs("peft")


def args_of(entry: str, checkpointing: bool = False):
    """(benchmark folder, main module, parsed options) of a standard-suite entry, with
    activation checkpointing as asked."""
    folder, job = jobs()[entry]
    module = load_footprint(folder)
    bench = sibling_main(module.__file__)
    args = copy.copy(bench.parse_args(job["argv"]))
    args.gradient_checkpointing = checkpointing
    return module, bench, args


def close(analytic: float, counted: float, entry: str) -> None:
    assert counted > 0, entry
    assert abs(analytic - counted) / counted < 0.05, (entry, analytic, counted)


@pytest.mark.slow
@pytest.mark.parametrize(
    "entry",
    ["llama-train", "llm-lora-single", "llm-lora-mp-gpus", "llm-full-mp-gpus"],
)
def test_llm_formula(entry):
    import torch

    module, bench, args = args_of(entry)
    counted = count_flops_on_meta(lambda: bench.workload(args), precision=args.precision)
    model, _ = bench.build(args, torch.device("meta"))
    tokens = args.batch_size * args.seq_len
    close(bench.step_flops(model, tokens, bool(args.lora), args.seq_len), counted, entry)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [2, 8])
def test_dinov2_formula_and_its_recomputation(batch):
    """The student's blocks over the crops stochastic depth keeps (int(0.6 x crops) per
    branch: 2 of 4 global crops at batch 2, 9 of 16 local ones), both heads (the iBOT
    head over the whole ``upperbound`` buffer), the teacher, KoLeo."""
    module, bench, args = args_of("dinov2-giant-gpus")
    args.batch_size = batch
    model = count_flops_on_meta(lambda: module.workload(args), precision=args.precision)
    close(args.batch_size * bench.analytic_flops(args), model, "dinov2")
    args.gradient_checkpointing = True
    hardware = count_flops_on_meta(lambda: module.workload(args), precision=args.precision)
    # the student's blocks run their forward twice: 4/3 of their work, less for the rest
    assert 1.2 < hardware / model < 4 / 3, (hardware, model)


@pytest.mark.slow
def test_vjepa_formula_and_its_recomputation():
    """Both mask sets: the encoder and the predictor once per set, the target once."""
    module, bench, args = args_of("vjepa-gpus")
    args.batch_size = 2
    sets = module.masks(args)
    assert len(sets) == 2
    model = count_flops_on_meta(lambda: module.workload(args, sets), precision="bf16")
    shapes = [(c.shape[1], t.shape[1]) for c, t in sets]
    close(args.batch_size * bench.analytic_flops(args, shapes), model, "vjepa")
    args.gradient_checkpointing = True
    hardware = count_flops_on_meta(lambda: module.workload(args, sets), precision="bf16")
    assert 1.05 < hardware / model < 4 / 3, (hardware, model)


@pytest.mark.slow
def test_llava_formula():
    module, bench, args = args_of("llava-single")
    sys.path.insert(0, str(BENCHMARKS / "llava"))
    from shapes import SIZES

    counted = count_flops_on_meta(lambda: module.workload(args))
    analytic = args.batch_size * bench.analytic_flops(SIZES[args.size], args.text_len)
    close(analytic, counted, "llava-single")
