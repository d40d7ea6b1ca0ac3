"""Memory of a diffusion entry per GPU and per node (`benchkit.memory`): Stable Diffusion
1.5's UNet, CLIP text encoder and VAE built on the meta device. Training: the UNet learns
(AdamW), the two others are frozen; one step over the configured batch is measured there
(the VAE encodes the images and the text encoder the prompts without gradients, the UNet
forward and backward). Generation: nothing learns; one denoising step (the UNet on the
conditioned and unconditioned halves) and the VAE's decoding. Under torchrun the UNet is
wrapped in DDP. The networks are built on the host, then moved to their device."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options) on ``world`` ranks."""
    import torch
    import torch.nn.functional as F

    bench = sibling_main(__file__)
    shape = bench.SHAPES[args.size]
    size, tokens = shape["image"], shape["clip"]["max_position_embeddings"]
    latent = shape["unet"]["sample_size"]

    def make() -> Workload:
        with torch.device("meta"):
            unet, text, vae = bench.build(shape, torch.device("meta"))
        b = args.batch_size

        if args.task == "generate":
            unet.eval().requires_grad_(False)

            @torch.no_grad()
            def generate() -> None:
                states = text(torch.zeros(2 * b, tokens, dtype=torch.long))[0]
                x = torch.zeros(b, 4, latent, latent)
                noise = unet(torch.cat([x, x]), 10, states).sample
                vae.decode(noise[:b] / bench.LATENT_SCALE)

            return Workload([], generate, frozen=[unet, text, vae])

        unet.train()

        def step() -> None:
            with torch.no_grad():
                images = torch.zeros(b, 3, size, size)
                latents = vae.encode(images).latent_dist.sample() * bench.LATENT_SCALE
                states = text(torch.zeros(b, tokens, dtype=torch.long))[0]
            steps = torch.zeros(b, dtype=torch.long)
            pred = unet(latents, steps, states).sample
            F.mse_loss(pred.float(), latents.float()).backward()

        return Workload([unet], step, frozen=[text, vae])

    return estimate(
        make,
        precision=args.precision,
        optimizer="none" if args.task == "generate" else "adamw-foreach",
        parallel="ddp" if world > 1 else "none",
        world=world,
        ranks_per_node=ranks_per_node,
        built_on="host",
    )
