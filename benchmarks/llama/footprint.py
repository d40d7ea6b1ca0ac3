"""Memory of the Llama inference entry per GPU and per node (`benchkit.memory`): the
weights in ``--dtype`` built on the meta device, and the forward of a whole sequence
(prompt and generated tokens) with its KV cache, measured there: what the last
generation step holds. Nothing trains; the model is built directly on its device."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options), one process per GPU."""
    import torch

    bench = sibling_main(__file__)

    def make() -> Workload:
        model, _config = bench.make_model(args.size, bench.DTYPES[args.dtype], "meta")

        @torch.no_grad()
        def step() -> None:
            tokens = args.prompt_len + args.new_tokens
            ids = torch.zeros(args.batch_size, tokens, dtype=torch.long)
            model(input_ids=ids, use_cache=True, logits_to_keep=1)

        return Workload([], step, frozen=[model])

    return estimate(make, optimizer="none", ranks_per_node=ranks_per_node, built_on="device")
