"""Memory of a LLaVA entry per GPU and per node (`benchkit.memory`): the model built on
the meta device in the run's dtype, trained whole with AdamW (torch's foreach kernels on
a GPU: a copy of the weights at the step, larger than the activations), and one forward
+ backward of the configured batch measured there: the vision tower on the images, the projector,
the text model on the text tokens with the image features in place of the placeholders,
the LM head and the loss. (The placeholders are put in place by concatenation here: the
model's own merge looks up their positions in the data, which tensors without data cannot
answer; the shapes are the same.) Under torchrun the model is wrapped in DDP. The model
is built directly on its device. With upstream's inputs prepared, the checkpoint's shape
(llava-1.5-7b's: the ``7b`` size)."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def workload(args: argparse.Namespace) -> Workload:
    """The model (trained whole) in the run's dtype and one step of ``--batch-size``
    samples of ``--text-len`` text tokens and one image, on the meta device."""
    import torch
    import torch.nn.functional as F

    bench = sibling_main(__file__)
    from shapes import PREFIX_TOKENS

    shape = bench.model_shape(args)  # the checkpoint's with upstream's inputs, else --size's
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    model = bench.build_model(shape, torch.device("meta"), dtype)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    inner = model.model
    layer = model.config.vision_feature_layer

    def step() -> None:
        b, size = args.batch_size, shape.image_size
        pixels = torch.zeros(b, 3, size, size, dtype=dtype)
        ids = torch.zeros(b, args.text_len, dtype=torch.long)
        out = inner.vision_tower(pixels, output_hidden_states=True, return_dict=True)
        image = inner.multi_modal_projector(out.hidden_states[layer][:, 1:])
        text = inner.get_input_embeddings()(ids)
        embeds = torch.cat([text[:, :PREFIX_TOKENS], image, text[:, PREFIX_TOKENS:]], 1)
        hidden = inner.language_model(inputs_embeds=embeds).last_hidden_state
        logits = model.lm_head(hidden).float()
        labels = torch.zeros(b * embeds.shape[1], dtype=torch.long)
        F.cross_entropy(logits.flatten(0, 1), labels).backward()

    return Workload([model], step)


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options) on ``world`` ranks."""
    return estimate(
        lambda: workload(args),
        optimizer="adamw-foreach",  # torch's AdamW without fused=True: foreach on a GPU
        parallel="ddp" if world > 1 else "none",
        world=world,
        ranks_per_node=ranks_per_node,
        built_on="device",
    )
