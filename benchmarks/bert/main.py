"""Masked-LM training of a randomly initialised BERT (transformers), on synthetic tokens.

The model comes from a `transformers.BertConfig` (no download: ``--size`` picks the
shape, ``base`` is bert-base-uncased's), trained with the masked-language-modelling
objective: 15% of the positions are masked and predicted. Throughput is sequences/s.
``--precision`` selects fp32, tf32 (GPU), fp16 or bf16 (autocast), or tf32-fp16 (TF32
for what stays fp32, fp16 autocast: upstream's bert-tf32-fp16).

Runs by hand too: ``python main.py --size tiny``.
"""

from __future__ import annotations

import argparse
import itertools

import torch

from benchkit.flops import count_and_declare
from benchkit.timing import TimedIterator
from benchkit.torchsetup import PRECISIONS, add_common_arguments, optimizer_step, setup

SIZES = {
    # name: (hidden, layers, heads, intermediate, vocab)
    "tiny": (64, 2, 2, 256, 1024),
    "small": (256, 4, 4, 1024, 8192),
    "base": (768, 12, 12, 3072, 30522),
    "large": (1024, 24, 16, 4096, 30522),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-4)
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"])
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
    run = setup(args)
    device = run.device

    model, vocab = make_model(args.size, args.seq_len)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = run.grad_scaler()
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"bert: {args.size} ({n_params / 1e6:.1f}M parameters), batch {args.batch_size}x{args.seq_len}, "
        f"{args.precision} on {device}, {torch.get_num_threads()} threads",
        flush=True,
    )

    batches = mlm_batches(args, vocab, device)
    inputs, attention, labels = next(batches)

    def one_step() -> None:
        with run.autocast():
            model(input_ids=inputs, attention_mask=attention, labels=labels).loss.backward()

    # One counted forward + backward: the report's TFLOPS and MFU (items: sequences).
    count_and_declare(one_step, args.batch_size, precision=args.precision)
    model.zero_grad(set_to_none=True)
    timed = TimedIterator(batches, batch_size_fn=lambda b: b[0].shape[0], device=device)
    for inputs, attention, labels in timed:
        with run.autocast():
            loss = model(input_ids=inputs, attention_mask=attention, labels=labels).loss
        optimizer_step(loss, opt, scaler)
        timed.record_loss(loss)


if __name__ == "__main__":
    main()
