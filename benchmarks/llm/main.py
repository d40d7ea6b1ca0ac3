"""Causal-LM training of a randomly initialised Llama-style decoder (transformers).

The model comes from a `transformers.LlamaConfig` (RMSNorm, rotary embeddings, SwiGLU
MLP, grouped-query attention), built with random weights: nothing is downloaded.
``--size`` picks the shape (``tiny`` for tests and CPUs, ``1b``/``3b``-class shapes for
GPUs). Tokens are synthetic; throughput is tokens/s.

Under torchrun (``WORLD_SIZE`` set) it trains data-parallel (DistributedDataParallel over
``--backend``), and rank 0 reports the global tokens/s.

Runs by hand too: ``python main.py --size tiny``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os

import torch

from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, default_device, optimizer_step, setup

SIZES = {
    # name: (hidden, layers, heads, kv heads, intermediate, vocab)
    "tiny": (128, 2, 4, 2, 344, 2048),
    "small": (512, 8, 8, 4, 1376, 32000),
    "1b": (2048, 16, 32, 8, 8192, 128256),
    "3b": (3072, 28, 24, 8, 8192, 128256),
}


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
    add_common_arguments(parser, default_precision="bf16")
    return parser.parse_args(argv)


def setup_distributed(args: argparse.Namespace, device_type: str) -> tuple[torch.device, int]:
    """This rank's device, and the rank (0 when not launched by torchrun)."""
    if "WORLD_SIZE" not in os.environ:
        return torch.device(device_type), 0
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(device_type, local_rank) if device_type != "cpu" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend=args.backend or ("nccl" if device.type == "cuda" else "gloo"))
    return device, dist.get_rank()


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
        use_cache=False,
    )
    return LlamaForCausalLM(config), vocab


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank = setup_distributed(args, args.device or default_device())
    run = setup(args, device=device)

    model, vocab = make_model(args.size, args.seq_len)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.to(device).train()
    if "WORLD_SIZE" in os.environ:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=device.type == "cuda")
    scaler = run.grad_scaler()
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(
            f"llm: {args.size} ({n_params / 1e6:.1f}M parameters), batch {args.batch_size}x{args.seq_len}, "
            f"{args.precision} on {device}, {torch.get_num_threads()} threads",
            flush=True,
        )

    gen = torch.Generator().manual_seed(args.seed + rank)
    pool = [
        torch.randint(0, vocab, (args.batch_size, args.seq_len), generator=gen).to(device)
        for _ in range(4)
    ]
    timed = TimedIterator(
        itertools.cycle(pool), batch_size_fn=lambda ids: ids.numel(), device=device, units="Tok/s"
    )
    try:
        for ids in timed:
            with run.autocast():
                loss = model(input_ids=ids, labels=ids).loss
            optimizer_step(loss, opt, scaler)
            timed.record_loss(loss)
    finally:
        model = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


def teardown_distributed() -> None:
    """Destroy the process group on every exit path: a group left to interpreter exit can
    hang or abort the process (NCCL, gloo under load)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
