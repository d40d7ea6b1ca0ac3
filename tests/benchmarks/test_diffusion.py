"""benchmarks/diffusion at tiny sizes on CPU: the training step in one process and over two
torchrun ranks (gloo, DDP on the UNet only), generation with guidance and the FLOPs
declaration, read from the session's smoke run (its `diffusion-single`, `diffusion-gpus`
and `sd15-txt-to-image` entries); the frozen text encoder and VAE left untouched, and
SD2's shapes."""

from __future__ import annotations

import importlib.util

from needs import needs

from .conftest import BENCHMARKS
from .smokerun import SmokeRun

needs("diffusers")
MAIN = "benchmarks/diffusion/main.py"


def test_train_one_process(smoke: SmokeRun):
    """Reads the session's smoke run (entry ``diffusion-single``: tiny, fp32, batch 4)."""
    entry = "diffusion-single"
    assert smoke.command(entry)[1].endswith(MAIN)
    assert "--task" not in smoke.command(entry)  # the default task: train
    smoke.check_measured(entry, "items/s")
    decl = smoke.declared_flops(entry)
    assert len(decl) == 1 and decl[0]["flops_source"] == "counted"
    assert "diffusion: train tiny UNet" in smoke.stdout_of(entry)


def test_train_two_ranks(smoke: SmokeRun):
    """Reads the session's smoke run (entry ``diffusion-gpus``: torchrun, 2 gloo ranks)."""
    entry = "diffusion-gpus"
    command = smoke.command(entry)
    assert "--nproc-per-node=2" in command and any(c.endswith(MAIN) for c in command)
    assert smoke.option(entry, "--backend") == "gloo"
    smoke.check_measured(entry, "items/s")
    assert "x 2, fp32 on cpu" in smoke.stdout_of(entry)
    assert len(smoke.event_data(entry, "stop")) == 1
    assert "terminate called" not in smoke.stderr_of(entry)


def test_generate(smoke: SmokeRun):
    """Reads the session's smoke run (entry ``sd15-txt-to-image``: ``--task generate``,
    tiny, batch 2, 4 inference steps)."""
    entry = "sd15-txt-to-image"
    assert smoke.command(entry)[1].endswith(MAIN)
    assert smoke.option(entry, "--task") == "generate"
    steps = smoke.option(entry, "--inference-steps")
    smoke.check_measured(entry, "items/s", loss=False)
    assert f"{steps} steps, guidance 7.5" in smoke.stdout_of(entry)
    assert [r["flops_source"] for r in smoke.declared_flops(entry)] == ["counted"]


def test_frozen_networks_stay_frozen():
    import torch

    spec = importlib.util.spec_from_file_location("diff_main", BENCHMARKS / "diffusion" / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    unet, text, vae = module.build(module.TINY, torch.device("cpu"))
    assert all(p.requires_grad for p in unet.parameters())
    assert not any(p.requires_grad for p in (*text.parameters(), *vae.parameters()))
    assert not text.training and not vae.training


def test_sd2_shapes():
    """``--size sd2`` (upstream's Milabench/stable-diffusion-2, read as Stable Diffusion 2's
    published configuration): a UNet with 1024-wide cross-attention, heads of 64 (5/10/20/20)
    and linear projections, OpenCLIP ViT-H's text tower (23 layers of 1024, GELU), SD's VAE.
    Built on the meta device (no memory) to count parameters."""
    import torch

    spec = importlib.util.spec_from_file_location(
        "diff_main_sd2", BENCHMARKS / "diffusion" / "main.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.parse_args([]).size == "sd2"
    args = module.parse_args([])
    assert (args.lr, args.weight_decay) == (1e-4, 1e-2)
    with torch.device("meta"):
        unet, text, vae = module.build(module.SD2, torch.device("meta"))
    assert unet.config.cross_attention_dim == 1024 and unet.config.use_linear_projection
    assert tuple(unet.config.attention_head_dim) == (5, 10, 20, 20)
    assert 860e6 < sum(p.numel() for p in unet.parameters()) < 870e6
    cfg = text.config
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (1024, 23, 16)
    assert (cfg.intermediate_size, cfg.hidden_act, cfg.max_position_embeddings) == (
        4096,
        "gelu",
        77,
    )
    assert 335e6 < sum(p.numel() for p in text.parameters()) < 345e6
    assert vae.config.latent_channels == 4 and tuple(vae.config.block_out_channels) == (
        128, 256, 512, 512,
    )  # fmt: skip
