"""Masked-LM training of a randomly initialised BERT (transformers), on synthetic tokens.

The model comes from a `transformers.BertConfig` (no download: ``--size`` picks the
shape, ``base`` is bert-base-uncased's), trained with the masked-language-modelling
objective: 15% of the positions are masked and predicted. Throughput is sequences/s.
``--precision`` selects fp32, tf32 (GPU), fp16 or bf16 (autocast).

Runs by hand too: ``python main.py --size tiny``.
"""

from __future__ import annotations

import argparse
import itertools

import torch

from benchkit.timing import TimedIterator

SIZES = {
    # name: (hidden, layers, heads, intermediate, vocab)
    "tiny": (64, 2, 2, 256, 1024),
    "small": (256, 4, 4, 1024, 8192),
    "base": (768, 12, 12, 3072, 30522),
    "large": (1024, 24, 16, 4096, 30522),
}


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--precision", choices=["fp32", "tf32", "fp16", "bf16"], default="fp32")
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None, help="intra-op CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def make_model(size: str, seq_len: int):
    from transformers import BertConfig, BertForMaskedLM

    hidden, layers, heads, intermediate, vocab = SIZES[size]
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max(512, seq_len),
    )
    return BertForMaskedLM(config), vocab


def mlm_batches(args: argparse.Namespace, vocab: int, device: torch.device):
    """Endless masked batches: 15% of positions replaced by [MASK] (id 103 or 1) and scored."""
    gen = torch.Generator().manual_seed(args.seed)
    mask_id = 103 if vocab > 103 else 1
    pool = []
    for _ in range(8):
        ids = torch.randint(
            1000 if vocab > 2000 else 2, vocab, (args.batch_size, args.seq_len), generator=gen
        )
        masked = torch.rand(ids.shape, generator=gen) < 0.15
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        inputs = torch.where(masked, torch.full_like(ids, mask_id), ids)
        attention = torch.ones_like(ids)
        pool.append(tuple(t.to(device) for t in (inputs, attention, labels)))
    return itertools.cycle(pool)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device or default_device())
    if args.threads:
        torch.set_num_threads(args.threads)
    if device.type == "cuda":
        allow = args.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)

    model, vocab = make_model(args.size, args.seq_len)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"bert: {args.size} ({n_params / 1e6:.1f}M parameters), batch {args.batch_size}x{args.seq_len}, "
        f"{args.precision} on {device}, {torch.get_num_threads()} threads",
        flush=True,
    )

    timed = TimedIterator(
        mlm_batches(args, vocab, device), batch_size_fn=lambda b: b[0].shape[0], device=device
    )
    for inputs, attention, labels in timed:
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = model(input_ids=inputs, attention_mask=attention, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        timed.record_loss(loss)


if __name__ == "__main__":
    main()
