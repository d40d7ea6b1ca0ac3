"""Causal-LM training of a randomly initialised Llama-style decoder (transformers):
pre-training steps, LoRA fine-tuning (peft) and sharded full fine-tuning (FSDP).

The model comes from a `transformers.LlamaConfig` (RMSNorm, rotary embeddings, SwiGLU
MLP, grouped-query attention), built with random weights: nothing is downloaded.
``--size`` picks the shape (``tiny`` for tests and CPUs; ``1b``/``3b``-class shapes;
``8b`` and ``70b``: Llama-3.1-8B's and -70B's published shapes). Tokens are synthetic;
throughput is tokens/s of the whole job.

* ``--lora R``: peft LoRA adapters of rank R (alpha 2R) on the attention projections
  (q, k, v, o); the base weights are frozen, only the adapters train.
* ``--grad-accum N``: the optimiser steps every N micro-batches (a timed step is one
  micro-batch; every N-th also pays for the optimiser step).
* ``--param-dtype bf16``: weights (and so gradients and optimiser state) in bf16, as the
  fine-tuning recipes of the upstream entries keep them.
* Under torchrun (``WORLD_SIZE`` set): data-parallel by default (DDP over ``--backend``);
  ``--fsdp`` shards parameters, gradients and optimiser state instead (torch FSDP2,
  ``fully_shard`` per decoder layer), ``--cpu-offload`` keeps the shards in host memory
  (what a 70B full fine-tuning needs on 8 x 80 GB). Rank 0 reports the global tokens/s.

Runs by hand too: ``python main.py --size tiny``.
"""

from __future__ import annotations

import argparse
import itertools
import os

import torch

from benchkit.flops import declare_flops
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, init_distributed, setup, teardown_distributed

SIZES = {
    # name: (hidden, layers, heads, kv heads, intermediate, vocab)
    "tiny": (128, 2, 4, 2, 344, 2048),
    "small": (512, 8, 8, 4, 1376, 32000),
    "1b": (2048, 16, 32, 8, 8192, 128256),
    "3b": (3072, 28, 24, 8, 8192, 128256),
    "8b": (4096, 32, 32, 8, 14336, 128256),  # Llama-3.1-8B
    "70b": (8192, 80, 64, 8, 28672, 128256),  # Llama-3.1-70B
}
PARAM_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument(
        "--gradient-checkpointing", action="store_true", help="trade compute for memory"
    )
    parser.add_argument(
        "--backend", default=None, help="collectives under torchrun (default: by device)"
    )
    parser.add_argument("--lora", type=int, default=0, metavar="RANK", help="LoRA rank (0: off)")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step")
    parser.add_argument("--param-dtype", choices=sorted(PARAM_DTYPES), default="fp32")
    parser.add_argument("--fsdp", action="store_true", help="shard with FSDP2 under torchrun")
    parser.add_argument("--cpu-offload", action="store_true", help="FSDP shards in host memory")
    add_common_arguments(parser, default_precision="bf16")
    return parser.parse_args(argv)


def make_model(size: str, seq_len: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, heads, kv_heads, intermediate, vocab = SIZES[size]
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate,
        max_position_embeddings=max(2048, seq_len),
        rope_theta=500000.0,
        use_cache=False,
    )
    return LlamaForCausalLM(config), vocab


def add_lora(model, rank: int):
    """peft LoRA adapters on q/k/v/o (alpha = 2 x rank, no dropout); base frozen."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def shard(model, args: argparse.Namespace, device: torch.device):
    """FSDP2: every decoder layer its own unit, then the root (embeddings, head)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    options = {}
    if device.type == "cuda" and args.precision == "bf16" and args.param_dtype == "fp32":
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    if args.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    layers = [m for m in model.modules() if type(m).__name__ == "LlamaDecoderLayer"]
    for layer in layers:
        fully_shard(layer, **options)
    fully_shard(model, **options)
    return model


def step_flops(model, tokens: int, lora: bool) -> float:
    """Analytic FLOPs of one training step over ``tokens`` tokens (matmuls only).

    Full training: 6 x parameters per token (forward 2, backward 4). LoRA: the frozen
    base costs its forward (2) and the input gradients of its backward (2), the adapters
    the full 6; the embedding lookup costs nothing. (A 70B step cannot be counted
    cheaply; tests check this formula against `benchkit.flops.count_flops`.)"""
    embed = model.get_input_embeddings().weight.numel()
    total = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if not lora:
        return 6.0 * (total - embed) * tokens
    return (4.0 * (total - trained - embed) + 6.0 * trained) * tokens


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, _world = init_distributed(args)
    run = setup(args, device=device)
    distributed = "WORLD_SIZE" in os.environ

    model, vocab = make_model(args.size, args.seq_len)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        if args.lora:  # frozen embeddings: checkpointed blocks need an input with a grad
            model.enable_input_require_grads()
    model.to(dtype=PARAM_DTYPES[args.param_dtype])
    if args.lora:
        model = add_lora(model, args.lora)
    step_tokens = args.batch_size * args.seq_len
    flops = step_flops(model, step_tokens, bool(args.lora))
    if args.cpu_offload and device.type == "cpu":
        args.cpu_offload = False  # the shards are in host memory already
    if distributed and args.fsdp:
        model = shard(model, args, device)
        if not args.cpu_offload:
            model.to(device)
    else:
        model.to(device)
    model.train()
    if distributed and not args.fsdp:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    trained = [p for p in model.parameters() if p.requires_grad]
    fused = device.type == "cuda" and not args.cpu_offload
    opt = torch.optim.AdamW(trained, lr=args.lr, fused=fused)
    scaler = run.grad_scaler()
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        n_trained = sum(p.numel() for p in trained)
        mode = "fsdp" if distributed and args.fsdp else ("ddp" if distributed else "single")
        print(
            f"llm: {args.size} ({n_params / 1e6:.1f}M parameters"
            f"{'' if n_trained == n_params else f', {n_trained / 1e6:.2f}M trained'}), "
            f"{mode}, batch {args.batch_size}x{args.seq_len}, accumulation {args.grad_accum}, "
            f"{args.precision} on {device} ({args.param_dtype} weights), "
            f"{torch.get_num_threads()} threads",
            flush=True,
        )
        declare_flops(flops / step_tokens, precision=args.precision, source="analytic")

    gen = torch.Generator().manual_seed(args.seed + rank)
    pool = [
        torch.randint(0, vocab, (args.batch_size, args.seq_len), generator=gen).to(device)
        for _ in range(4)
    ]
    # A timed step is one micro-batch; every `--grad-accum`-th one also runs the optimiser
    # step, so the rate (tokens/s) includes its cost, spread as it is in training, and a
    # large accumulation still gives many observations inside the window.
    timed = TimedIterator(
        itertools.cycle(pool), batch_size_fn=lambda ids: ids.numel(), device=device, units="Tok/s"
    )
    try:
        for i, ids in enumerate(timed):
            with run.autocast():
                loss = model(input_ids=ids, labels=ids).loss
            scaler.scale(loss / args.grad_accum).backward()
            if (i + 1) % args.grad_accum == 0:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
            timed.record_loss(loss)
    finally:
        model = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


if __name__ == "__main__":
    main()
