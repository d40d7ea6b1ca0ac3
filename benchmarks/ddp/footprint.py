"""Memory of a ddp entry per GPU and per node (`benchkit.memory`): the MLP built on the
meta device, one forward + backward of the configured batch measured there, SGD with
momentum, DDP's gradient buckets under torchrun. The model is built on the host."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options) on ``world`` ranks."""
    import torch
    import torch.nn.functional as F

    bench = sibling_main(__file__)

    def make() -> Workload:
        with torch.device("meta"):
            model = bench.make_model(args)

        def step() -> None:
            x = torch.zeros(args.batch_size, args.features)
            y = torch.zeros(args.batch_size, dtype=torch.long)
            F.cross_entropy(model(x), y).backward()

        return Workload([model], step)

    return estimate(
        make,
        precision=args.precision,
        optimizer="sgd-momentum",
        parallel="ddp" if world > 1 else "none",
        world=world,
        ranks_per_node=ranks_per_node,
    )
