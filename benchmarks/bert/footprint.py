"""Memory of a BERT entry per GPU and per node (`benchkit.memory`): the masked-LM model
built on the meta device and one forward + backward of the configured batch measured
there, trained with Adam (two states per weight); the model is built on the host, then
moved to its device."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options), one process per GPU."""
    import torch

    bench = sibling_main(__file__)

    def make() -> Workload:
        with torch.device("meta"):
            model, vocab = bench.make_model(args.size, args.seq_len)
        model.train()
        ids = torch.zeros(args.batch_size, args.seq_len, dtype=torch.long)
        return Workload([model], lambda: model(input_ids=ids, labels=ids).loss.backward())

    return estimate(
        make, precision=args.precision, optimizer="adam-foreach", ranks_per_node=ranks_per_node
    )
