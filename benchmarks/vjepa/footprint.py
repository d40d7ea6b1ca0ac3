"""Memory of a V-JEPA entry per GPU and per node (`benchkit.memory`), from the context
encoder and the predictor (trained with AdamW) and the EMA target encoder (frozen) built
on the meta device, and one step over the configured batch of clips measured there, with
the mask sets drawn as the benchmark's collate draws them (the target on every tubelet,
then per set the encoder on the visible ones and the predictor on both). Activation
checkpointing is taken into account when it is on; under torchrun both trained networks
are wrapped in DDP."""

from __future__ import annotations

import argparse
import copy

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def masks(args: argparse.Namespace) -> list[tuple]:
    """``(context, targets)`` token indices ``[batch, K]`` of each mask set, drawn as the
    run draws them (seeded): real index tensors, whose sizes shape the step."""
    import torch

    bench = sibling_main(__file__)
    torch.manual_seed(0)
    _clips, context, targets = bench.MaskCollator(args)([torch.zeros(1)] * args.batch_size)
    return list(zip(context, targets, strict=True))


def workload(args: argparse.Namespace, sets: list[tuple], depth: int | None = None) -> Workload:
    """Encoder and predictor (trained), target (frozen) and one step of ``--batch-size``
    clips masked by ``sets`` (`masks`), on the meta device; with ``depth``, encoder and
    target with that many blocks (the shallow copies of `benchkit.memory.by_depth`; the
    predictor keeps its own)."""
    import torch

    from benchshared.vit import ARCHES

    bench = sibling_main(__file__)
    tokens = (args.frames // args.tubelet) * (args.image_size // args.patch) ** 2
    with torch.device("meta"):
        encoder, predictor = bench.build(args, tokens, depth)
        target = copy.deepcopy(encoder).requires_grad_(False)
    encoder.train()
    predictor.train()
    context, targets = [c for c, _ in sets], [t for _, t in sets]

    def step() -> None:
        x = torch.zeros(args.batch_size, 3, args.frames, args.image_size, args.image_size)
        bench.jepa_loss(target, encoder, predictor, x, context, targets).backward()

    if depth is not None:
        return Workload([encoder, predictor], step, frozen=[target], depth=depth)
    return Workload(
        [encoder, predictor], step, frozen=[target], depth=ARCHES[args.arch][1],
        at_depth=lambda n: workload(args, sets, n),
    )  # fmt: skip


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options) on ``world`` ranks, ``ranks_per_node``
    processes per node."""
    sets = masks(args)
    return estimate(
        lambda: workload(args, sets),
        precision=args.precision,
        optimizer="adamw-foreach",  # torch's AdamW without fused=True: foreach on a GPU
        parallel="ddp" if world > 1 else "none",
        world=world,
        ranks_per_node=ranks_per_node,
        built_on="host",
    )
