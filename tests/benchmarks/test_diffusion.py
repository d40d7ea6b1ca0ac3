"""benchmarks/diffusion at tiny sizes on CPU: the training step in one process and over two
torchrun ranks (gloo, DDP on the UNet only), generation with guidance, the frozen text
encoder and VAE left untouched, and the FLOPs declaration."""

from __future__ import annotations

import importlib.util

import pytest

from .conftest import BENCHMARKS, bench_env, run_smuggled, run_with_pipe
from .test_llm_finetune import torchrun
from .test_mains import check_budget

pytest.importorskip("diffusers")
TINY = ["--size", "tiny", "--precision", "fp32", "--device", "cpu"]


@pytest.mark.slow
def test_train_one_process(python):
    run = run_with_pipe(
        [python, "main.py", *TINY, "--batch-size", "4"], bench_env(stop=3, skip=1),
        BENCHMARKS / "diffusion",
    )  # fmt: skip
    check_budget(run, 3, "items/s")
    decl = [r for r in run.records if "flops_per_item" in r]
    assert len(decl) == 1 and decl[0]["flops_source"] == "counted"


@pytest.mark.slow
def test_train_two_ranks(python):
    run = run_smuggled(
        [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *TINY,
         "--batch-size", "2", "--backend", "gloo"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "diffusion",
    )  # fmt: skip
    check_budget(run, 3, "items/s")
    assert "x 2, fp32 on cpu" in run.stdout and len(run.events("stop")) == 1
    assert "terminate called" not in run.stderr


@pytest.mark.slow
def test_generate(python):
    run = run_with_pipe(
        [python, "main.py", *TINY, "--task", "generate", "--batch-size", "2",
         "--inference-steps", "2"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "diffusion",
    )  # fmt: skip
    check_budget(run, 3, "items/s", loss=False)
    assert "2 steps, guidance 7.5" in run.stdout
    assert [r["flops_source"] for r in run.records if "flops_per_item" in r] == ["counted"]


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
