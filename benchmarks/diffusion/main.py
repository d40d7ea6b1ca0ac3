"""Stable-Diffusion training and text-to-image generation with diffusers, from random
weights.

The standard suite's diffusion-single / -gpus / -nodes (training) and sd15-txt-to-image
(generation) entries. The three networks are built from published configurations with
random weights (nothing is downloaded):

``--size sd2`` (training: upstream's ``Milabench/stable-diffusion-2``, Stable Diffusion 2's
configuration files as stabilityai/stable-diffusion-2 publishes them):

* ``UNet2DConditionModel``: 4 latent channels, blocks 320/640/1280/1280, 2 layers per
  block, 5/10/20/20 heads of 64 with linear projections, cross-attention on 1024-wide
  text states (866M parameters), trained;
* ``CLIPTextModel`` (transformers): OpenCLIP ViT-H's text tower as SD2 ships it, 23
  layers of width 1024 (16 heads, feed-forward 4096, GELU) over 77 tokens, frozen;
* ``AutoencoderKL``: blocks 128/256/512/512, 512 px images <-> 64 x 64 x 4 latents, frozen.

``--size sd15``: Stable Diffusion 1.5's (768-wide cross-attention, 8 heads; CLIP ViT-L's
text encoder, 12 layers of width 768; the same VAE), the generation entry's.

``--task train`` (upstream's ``diffusion/main.py``): a step encodes a batch of 512 px
images to latents (VAE) and its token ids to text states (text encoder), both frozen and
held in the autocast dtype (bf16: upstream casts them to ``weight_dtype``) outside
autocast, adds DDPM noise at random timesteps (``DDPMScheduler`` with SD's scaled-linear
betas) and trains the fp32 UNet under autocast to predict the noise (MSE; AdamW with
weight decay 1e-2). Images in [-1, 1] and token ids are synthetic, a pool of batches in
host memory copied to the device every step (upstream's loader hands host batches to the
step; its decoding and resizing run in 8 worker processes).
``--task generate``: classifier-free guidance over ``--inference-steps`` DDIM steps from
noise, then the VAE decodes; the rate is images/s.

Under torchrun the UNet trains data-parallel (DDP) and rank 0 reports the global rate.
``--size tiny`` shrinks the three networks for CPU runs: ``python main.py --size tiny``.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

import torch
import torch.nn.functional as F

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import (
    PRECISIONS,
    add_common_arguments,
    init_distributed,
    requested_device,
    require_device,
    setup,
    teardown_distributed,
)

SD15 = {
    "unet": dict(
        sample_size=64,
        in_channels=4,
        out_channels=4,
        block_out_channels=(320, 640, 1280, 1280),
        layers_per_block=2,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        cross_attention_dim=768,
        attention_head_dim=8,
    ),
    "vae": dict(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        block_out_channels=(128, 256, 512, 512),
        layers_per_block=2,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        sample_size=512,
    ),
    "clip": dict(
        vocab_size=49408,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        max_position_embeddings=77,
    ),
    "image": 512,
}
SD2 = {
    "unet": dict(
        sample_size=96,
        in_channels=4,
        out_channels=4,
        block_out_channels=(320, 640, 1280, 1280),
        layers_per_block=2,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        cross_attention_dim=1024,
        attention_head_dim=(5, 10, 20, 20),  # diffusers' name for the head counts
        use_linear_projection=True,
    ),
    "vae": SD15["vae"],
    "clip": dict(
        vocab_size=49408,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=23,
        num_attention_heads=16,
        max_position_embeddings=77,
        hidden_act="gelu",
        projection_dim=512,
    ),
    "image": 512,
}
TINY = {
    "unet": dict(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=4,
        norm_num_groups=8,
    ),
    "vae": dict(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        block_out_channels=(16, 32),
        layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        norm_num_groups=8,
        sample_size=32,
    ),
    "clip": dict(
        vocab_size=1000,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=16,
    ),
    "image": 32,
}
SHAPES = {"sd2": SD2, "sd15": SD15, "tiny": TINY}
LATENT_SCALE = 0.18215  # SD's VAE scaling factor


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["train", "generate"], default="train")
    parser.add_argument("--size", choices=list(SHAPES), default="sd2")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--weight-decay", type=float, default=1e-2, help="AdamW (upstream's)")
    parser.add_argument("--inference-steps", type=int, default=50)
    parser.add_argument("--guidance", type=float, default=7.5)
    parser.add_argument("--backend", default=None, help="collectives under torchrun")
    parser.add_argument("--num-workers", type=int, default=0, help="accepted (no loader)")
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"], default_precision="bf16")
    return parser.parse_args(argv)


def build(shape: dict, device: torch.device) -> tuple[Any, Any, Any]:
    """UNet (trainable), text encoder and VAE (frozen, eval) with random weights."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    unet = UNet2DConditionModel(**shape["unet"]).to(device)
    vae = AutoencoderKL(**shape["vae"]).to(device).eval().requires_grad_(False)
    text = CLIPTextModel(CLIPTextConfig(**shape["clip"])).to(device).eval().requires_grad_(False)
    return unet, text, vae


def batches(args: argparse.Namespace, shape: dict, device: torch.device, rank: int):
    """A pool of (images in [-1, 1], token ids) batches made once in host memory; each is
    copied to the device when it is used (as a loader's batch is)."""
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    size, tokens = shape["image"], shape["clip"]["max_position_embeddings"]
    vocab = shape["clip"]["vocab_size"]
    pool = [
        (
            torch.rand(args.batch_size, 3, size, size, generator=gen) * 2 - 1,
            torch.randint(0, vocab, (args.batch_size, tokens), generator=gen),
        )
        for _ in range(4)
    ]
    return ((images.to(device), ids.to(device)) for images, ids in itertools.cycle(pool))


def train(args: argparse.Namespace, shape: dict, device: torch.device, rank: int, world: int):
    from diffusers import DDPMScheduler

    run = setup(args, device=device)
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    unet, text, vae = build(shape, device)
    unet.train()
    # upstream: encoder.to(device, dtype=weight_dtype), vae likewise (bf16); they run
    # outside the UNet's autocast
    frozen_dtype = run.amp_dtype or torch.float32
    text.to(dtype=frozen_dtype)
    vae.to(dtype=frozen_dtype)
    scheduler = DDPMScheduler(
        num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear"
    )
    model = unet
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(
            unet, device_ids=[device.index] if device.type == "cuda" else None
        )
    opt = torch.optim.AdamW(unet.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    scaler = run.grad_scaler()
    if rank == 0:
        n = sum(p.numel() for p in unet.parameters())
        print(
            f"diffusion: train {args.size} UNet ({n / 1e6:.1f}M parameters), batch "
            f"{args.batch_size} per rank x {world}, {args.precision} on {device} (text "
            f"encoder and VAE in {str(frozen_dtype).removeprefix('torch.')})",
            flush=True,
        )

    def loss_of(images: torch.Tensor, ids: torch.Tensor, net: Any) -> torch.Tensor:
        with torch.no_grad():
            latents = vae.encode(images.to(frozen_dtype)).latent_dist.sample() * LATENT_SCALE
            states = text(ids)[0]
        noise = torch.randn_like(latents)
        steps = torch.randint(0, 1000, (latents.shape[0],), device=device)
        noisy = scheduler.add_noise(latents, noise, steps)
        with run.autocast():
            pred = net(noisy, steps, states).sample
        return F.mse_loss(pred.float(), noise.float())

    source = batches(args, shape, device, rank)
    first = next(source)
    # One counted step (VAE encode, text encoder, UNet forward + backward) on the plain
    # UNet (no collective): the report's TFLOPS and MFU, items = images.
    count_and_declare(lambda: loss_of(*first, unet).backward(), args.batch_size,
                      precision=args.precision)  # fmt: skip
    unet.zero_grad(set_to_none=True)
    timed = TimedIterator(source, batch_size=args.batch_size, device=device)
    try:
        for images, ids in timed:
            loss = loss_of(images, ids, model)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            timed.record_loss(loss)
    finally:
        model = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


def generate(args: argparse.Namespace, shape: dict, device: torch.device) -> None:
    from diffusers import DDIMScheduler

    run = setup(args, device=device)
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    unet, text, vae = build(shape, device)
    unet.eval().requires_grad_(False)
    scheduler = DDIMScheduler(
        num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear"
    )
    latent = shape["unet"]["sample_size"]
    print(
        f"diffusion: generate {args.size}, batch {args.batch_size}, {args.inference_steps} "
        f"steps, guidance {args.guidance}, {args.precision} on {device}",
        flush=True,
    )

    @torch.no_grad()  # not inference_mode: the FLOP counter sees nothing there
    def images(ids: torch.Tensor) -> torch.Tensor:
        with run.autocast():
            cond = text(ids)[0]
            uncond = text(torch.zeros_like(ids))[0]
            states = torch.cat([uncond, cond])
            x = torch.randn(ids.shape[0], 4, latent, latent, device=device)
            scheduler.set_timesteps(args.inference_steps, device=device)
            for t in scheduler.timesteps:
                both = unet(torch.cat([x, x]), t, states).sample
                u, c = both.chunk(2)
                x = scheduler.step(u + args.guidance * (c - u), t, x).prev_sample
            return vae.decode(x / LATENT_SCALE).sample

    source = (ids for _, ids in batches(args, shape, device, 0))
    first = next(source)
    count_and_declare(lambda: images(first), args.batch_size, precision=args.precision)
    timed = TimedIterator(source, batch_size=args.batch_size, device=device)
    for ids in timed:
        out = images(ids)
        assert out.shape[-1] == shape["image"]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    shape = SHAPES[args.size]
    if args.task == "generate":
        generate(args, shape, require_device(requested_device(args)))
        return
    device, rank, world = init_distributed(args)
    train(args, shape, device, rank, world)


if __name__ == "__main__":
    run_and_exit(main)
