"""Train a GPT-style causal language model (plain torch) on synthetic tokens; Tok/s.

The model is the usual decoder-only stack: token and position embeddings, pre-norm
blocks of causal multi-head self-attention (`scaled_dot_product_attention`) and a GELU
MLP, a final layer norm and a head tied to the token embedding. Tokens are random, so
the loss stays near ``log(vocab)``: the benchmark measures the cost of a training step,
not learning. Throughput is tokens/s (``batch * sequence length`` per step).

Runs by hand too: ``python main.py --layers 2 --dim 128``.
"""

from __future__ import annotations

import argparse
import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, optimizer_step, setup


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4)
    add_common_arguments(parser, precisions=["fp32", "bf16", "fp16", "tf32"])
    return parser.parse_args(argv)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        assert dim % heads == 0, "--dim must be a multiple of --heads"
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as GPT-2 does
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.tok(idx) + self.pos(pos))
        return self.head(self.ln_f(x))


def token_batches(args: argparse.Namespace, device: torch.device):
    """Endless random (input, target) batches, generated on the device (no I/O)."""
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    pool = torch.randint(0, args.vocab, (16, args.batch_size, args.seq_len + 1), generator=gen)
    pool = pool.to(device)
    for i in itertools.count():
        chunk = pool[i % len(pool)]
        yield chunk[:, :-1], chunk[:, 1:]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args)
    device = run.device

    model = GPT(args.vocab, args.seq_len, args.dim, args.heads, args.layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = run.grad_scaler()
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"transformer-lm: {n_params / 1e6:.1f}M parameters, batch {args.batch_size}x{args.seq_len}, "
        f"{args.precision} on {device}, {torch.get_num_threads()} threads",
        flush=True,
    )

    batches = token_batches(args, device)
    sample_in, sample_out = next(batches)

    def one_step() -> None:
        with run.autocast():
            logits = model(sample_in)
            F.cross_entropy(
                logits.view(-1, logits.shape[-1]).float(), sample_out.reshape(-1)
            ).backward()

    # One counted step (forward + backward): the report's TFLOPS and MFU.
    count_and_declare(one_step, sample_in.numel(), precision=args.precision)
    model.zero_grad(set_to_none=True)
    timed = TimedIterator(
        batches,
        batch_size_fn=lambda b: b[0].numel(),
        device=device,
        units="Tok/s",
    )
    model.train()
    for inputs, targets in timed:
        with run.autocast():
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))
        optimizer_step(loss, opt, scaler)
        timed.record_loss(loss)


if __name__ == "__main__":
    run_and_exit(main)
