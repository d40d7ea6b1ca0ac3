"""Memory of a T5, Reformer or Whisper entry per GPU and per node (`benchkit.memory`):
the model built on the meta device and one forward + backward of the configured batch of
synthetic samples (upstream's shapes) measured there, trained with Adam; the model is
built on the host, then moved to its device."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options), one process per GPU. Reformer's
    LSH attention sorts its tokens into buckets found by reading the data, which tensors
    without data cannot do: its small model (hidden 256) is built on the CPU and one real
    step of one sample is measured, its activations scaled to the batch."""
    import copy

    import torch

    bench = sibling_main(__file__)
    real = args.model == "Reformer"
    small = copy.copy(args)
    if real:
        small.batch_size = 1

    def make() -> Workload:
        with torch.device("cpu" if real else "meta"):
            model, shape = bench.FACTORIES[args.model](args.size == "tiny")
        model.train()
        skip_layerdrop_draw(model)
        batch = bench.collate(bench.samples(small, shape))  # small host tensors

        return Workload([model], lambda: model(**batch).loss.backward())

    with torch.random.fork_rng():
        return estimate(
            make,
            precision=args.precision,
            optimizer="adam-foreach",
            ranks_per_node=ranks_per_node,
            measured_at=(args.batch_size, small.batch_size) if real else None,
        )


def skip_layerdrop_draw(model) -> None:
    """Whisper's encoder and decoder in eval mode, their layers left in training mode,
    when that changes nothing: LayerDrop probability 0 and dropout 0 (whisper-tiny's).
    transformers 5.17 (the GPU image's; 5.23 tests the probability first) draws
    LayerDrop's ``torch.rand([]) < layerdrop`` in training whatever the probability, a
    decision that tensors without data cannot make (``DataDependentOutputException``,
    which cost whisper its estimate there); with both at 0
    no layer is ever dropped and the stack's own dropout is the identity, so the step
    measured is the one that runs."""
    for module in model.modules():
        layerdrop = getattr(module, "layerdrop", None)
        if isinstance(layerdrop, float) and layerdrop == 0.0 and not getattr(module, "dropout", 0):
            module.training = False
