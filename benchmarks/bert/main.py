"""Masked-LM training of a randomly initialised BERT (transformers), on synthetic tokens.

The model comes from a `transformers.BertConfig` (no download: ``--size`` picks the
shape, ``base`` is bert-base-uncased's). The step is upstream milabench's (its
``huggingface`` benchmark, model ``Bert``): random token ids in, independent random ids
as labels at every position (so every position is scored), no attention mask, Adam at
lr 1e-3, gradients accumulated across steps (upstream never clears them). The data path
is upstream's too: ``batch-size`` samples made once on the host, served in a loop by a
DataLoader with ``--num-workers`` workers and copied to the device at every step
(`benchkit.synthetic`). Throughput is sequences/s. ``--precision`` selects fp32, tf32 (GPU), fp16 or bf16 (autocast), or
tf32-fp16 (TF32 for what stays fp32, fp16 autocast: upstream's bert-tf32-fp16).

Runs by hand too: ``python main.py --size tiny``.
"""

from __future__ import annotations

import argparse

import torch

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare
from benchkit.memory import check_memory
from benchkit.synthetic import collate, repeated_loader, to_device
from benchkit.timing import TimedIterator
from benchkit.torchsetup import PRECISIONS, add_common_arguments, setup

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
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--num-workers", type=int, default=0, help="loader worker processes")
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


def samples(args: argparse.Namespace, vocab: int) -> list[dict[str, torch.Tensor]]:
    """``batch-size`` samples, as upstream makes them: ``input_ids`` and ``labels`` are
    independent uniform random ids over the vocabulary, labels at every position (none is
    -100, no input is masked), no attention mask."""
    gen = torch.Generator().manual_seed(args.seed)
    return [
        {
            "input_ids": torch.randint(0, vocab, (args.seq_len,), generator=gen),
            "labels": torch.randint(0, vocab, (args.seq_len,), generator=gen),
        }
        for _ in range(args.batch_size)
    ]


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """Upstream's optimiser: ``optim.Adam`` (no weight decay), lr 1e-3 by default."""
    return torch.optim.Adam(model.parameters(), lr=lr)


def train_step(loss: torch.Tensor, opt: torch.optim.Optimizer, scaler) -> None:
    """Upstream's optimiser step: scaled backward, step, update; the gradients are never
    cleared, so each backward adds into the previous ones (as upstream's Runner.step)."""
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args)
    device = run.device
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit

    model, vocab = make_model(args.size, args.seq_len)
    model.to(device).train()
    opt = make_optimizer(model, args.lr)
    scaler = run.grad_scaler()
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"bert: {args.size} ({n_params / 1e6:.1f}M parameters), batch {args.batch_size}x{args.seq_len}, "
        f"{args.precision} on {device}, {torch.get_num_threads()} threads",
        flush=True,
    )

    data = samples(args, vocab)
    first = to_device(collate(data), device)

    def one_step() -> None:
        with run.autocast():
            model(**first).loss.backward()

    # One counted forward + backward: the report's TFLOPS and MFU (items: sequences).
    count_and_declare(one_step, args.batch_size, precision=args.precision)
    model.zero_grad(set_to_none=True)
    loader = repeated_loader(data, args.batch_size, args.num_workers)
    timed = TimedIterator(loader, batch_size_fn=lambda b: b["labels"].shape[0], device=device)
    for batch in timed:
        batch = to_device(batch, device)  # upstream: {k: v.to(device) ...} every step
        with run.autocast():
            loss = model(**batch).loss
        train_step(loss, opt, scaler)
        timed.record_loss(loss)


if __name__ == "__main__":
    run_and_exit(main)
