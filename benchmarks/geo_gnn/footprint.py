"""Memory of a PNA or DimeNet entry per GPU and per node (`benchkit.memory`). A graph
batch's size is in its data (atoms and bonds per molecule, the radius graph and its
triplets), which tensors without data cannot tell: the model is small, so it is built on
the CPU and one real forward + backward over ``SMALL`` synthetic molecules (prepare.py's
generator) is measured, its activations scaled to the configured batch. Adam's two states
per weight."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main

SMALL = 64  # molecules in the measured step


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options), one process per GPU."""
    import torch
    from molecules import generate, in_degree_histogram, molecule
    from torch_geometric.data import Batch, Data

    bench = sibling_main(__file__)
    small = min(SMALL, args.batch_size)
    data = generate(small, seed=args.seed)
    stats = {"in_degree_histogram": in_degree_histogram(data).tolist()}

    def make() -> Workload:
        model = bench.make_model(args, stats).train()
        batch = Batch.from_data_list([Data.from_dict(molecule(data, i)) for i in range(small)])

        def step() -> None:
            pred = bench.predict(model, batch, args.use3d)
            bench.upstream_l1(pred.float(), batch.y).backward()

        return Workload([model], step)

    with torch.random.fork_rng():
        return estimate(
            make,
            precision=args.precision,
            optimizer="adam-foreach",
            ranks_per_node=ranks_per_node,
            measured_at=(args.batch_size, small),
        )
