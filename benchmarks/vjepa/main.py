"""V-JEPA training step on a video ViT-L/16, in plain torch: a context encoder on the
visible tubelets, a narrow predictor, an EMA target encoder on the whole clip, L1 loss on
the masked tubelets' features.

The standard suite's vjepa-single / -gpus entries. facebookresearch's jepa repository is
not on the package registries; this is its computational shape (`benchkit.vit`): clips of
16 frames of 224 px (``prepare.py`` writes them as ``.npy`` with a CSV list, upstream's
``FakeVideo/video_metainfo.csv``), tubelets of 2 x 16 x 16 (1568 tokens), ViT-L encoder
(1024 wide, 24 blocks), predictor 384 wide and 12 blocks deep. Multi-block masking: a few
spatial rectangles (together about 85-90% of the grid), the same across time, are hidden
from the context encoder; the predictor gets the context features plus mask tokens (with
positions) and predicts the target encoder's layer-normed features at the masked
positions. AdamW on encoder + predictor; the target follows by EMA.

Throughput: clips/s. Under torchrun the encoder and predictor train with DDP and rank 0
reports the global rate. ``--arch tiny`` for CPUs.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchkit.datasets import data_dir
from benchkit.flops import count_and_declare
from benchkit.timing import TimedIterator
from benchkit.torchsetup import (
    PRECISIONS,
    add_common_arguments,
    init_distributed,
    setup,
    teardown_distributed,
)
from benchkit.vision import MEAN, STD
from benchkit.vit import ARCHES, build_vit, ema_update


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(ARCHES), default="large")
    parser.add_argument("--predictor", choices=sorted(ARCHES), default="small")
    parser.add_argument("--patch", type=int, default=16)
    parser.add_argument("--tubelet", type=int, default=2)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=24, help="clips per device")
    parser.add_argument("--mask-blocks", type=int, default=8)
    parser.add_argument("--momentum", type=float, default=0.998, help="target EMA")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--dataset", default=None, help="video_metainfo.csv (default: FakeVideo)")
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--clips", type=int, default=64, help=argparse.SUPPRESS)  # prepare.py
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--backend", default=None, help="collectives under torchrun")
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"], default_precision="bf16")
    return parser.parse_args(argv)


class Clips(torch.utils.data.Dataset):
    """The clips listed in the CSV, as uint8 ``[3, T, H, W]``."""

    def __init__(self, csv: Path) -> None:
        if not csv.is_file():
            raise SystemExit(f"no clip list at {csv}: run prepare.py first")
        self.paths = [csv.parent / line.split()[0] for line in csv.read_text().splitlines()]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(np.load(self.paths[index])).permute(3, 0, 1, 2)


class Predictor(nn.Module):
    """Context features (projected to the predictor's width) + mask tokens -> features of
    the masked positions, projected back to the encoder's width."""

    def __init__(self, arch: str, enc_dim: int, tokens: int) -> None:
        super().__init__()
        self.vit = build_vit(arch, patch=1, max_tokens=tokens)
        self.vit.patch = nn.Identity()  # it reads features, not pixels (no unused weights)
        dim = self.vit.dim
        self.embed = nn.Linear(enc_dim, dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.out = nn.Linear(dim, enc_dim)

    def forward(
        self, context: torch.Tensor, keep: torch.Tensor, hide: torch.Tensor
    ) -> torch.Tensor:
        b = context.shape[0]
        pos = self.vit.pos[0]
        x = torch.cat(
            [self.embed(context) + pos[keep], self.mask_token.expand(b, len(hide), -1) + pos[hide]],
            dim=1,
        )
        x = self.vit.run_blocks(x)
        return self.out(x[:, len(keep) :])


def block_mask(t: int, h: int, w: int, blocks: int, gen: torch.Generator) -> tuple:
    """(visible, masked) token indices: ``blocks`` random rectangles of 15-40% of the
    grid side each (together most of it), the same at every time step."""
    hidden = torch.zeros(h, w, dtype=torch.bool)
    for _ in range(blocks):
        bh = max(1, int(h * (0.15 + 0.5 * torch.rand((), generator=gen).item())))
        bw = max(1, int(w * (0.15 + 0.5 * torch.rand((), generator=gen).item())))
        i = int(torch.randint(0, h - bh + 1, (), generator=gen))
        j = int(torch.randint(0, w - bw + 1, (), generator=gen))
        hidden[i : i + bh, j : j + bw] = True
    if hidden.all():
        hidden[0, 0] = False
    grid = hidden.flatten().repeat(t)
    index = torch.arange(grid.numel())
    return index[~grid], index[grid]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    run = setup(args, device=device)
    grid = (
        args.frames // args.tubelet,
        args.image_size // args.patch,
        args.image_size // args.patch,
    )
    tokens = grid[0] * grid[1] * grid[2]
    encoder = build_vit(
        args.arch, patch=args.patch, tubelet=args.tubelet, max_tokens=tokens,
        checkpointing=args.gradient_checkpointing,
    ).to(device)  # fmt: skip
    predictor = Predictor(args.predictor, encoder.dim, tokens).to(device)
    target = copy.deepcopy(encoder).requires_grad_(False)
    model = nn.ModuleDict({"encoder": encoder, "predictor": predictor})
    csv = Path(args.dataset or Path(data_dir("FakeVideo")) / "video_metainfo.csv")
    dataset = Clips(csv)
    sampler = None
    if world > 1:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(dataset, world, rank, seed=args.seed)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
        drop_last=True, num_workers=args.num_workers, persistent_workers=args.num_workers > 0,
    )  # fmt: skip
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1, 1) * 255
    gen = torch.Generator().manual_seed(args.seed + rank)
    if rank == 0:
        n = sum(p.numel() for p in encoder.parameters())
        print(
            f"vjepa: ViT-{args.arch} ({n / 1e6:.1f}M parameters), {tokens} tubelets per clip, "
            f"batch {args.batch_size} x {world}, {args.precision} on {device}",
            flush=True,
        )

    def loss_of(clips: torch.Tensor, enc: nn.Module, pred: nn.Module) -> torch.Tensor:
        x = (clips.to(device, non_blocking=True).float() - mean) / std
        keep, hide = block_mask(*grid, args.mask_blocks, gen)
        keep, hide = keep.to(device), hide.to(device)
        with run.autocast():
            with torch.no_grad():
                targets = F.layer_norm(target(x), (encoder.dim,))[:, hide]
            predicted = pred(enc(x, keep=keep), keep, hide)
            return F.l1_loss(predicted.float(), targets.float())

    def batches():
        for epoch in range(100_000):
            if sampler is not None:
                sampler.set_epoch(epoch)
            yield from loader

    sample = torch.randint(0, 256, (2, 3, args.frames, args.image_size, args.image_size),
                           dtype=torch.uint8)  # fmt: skip
    count_and_declare(lambda: loss_of(sample, encoder, predictor).backward(), 2,
                      precision=args.precision)  # fmt: skip
    model.zero_grad(set_to_none=True)
    enc: nn.Module = encoder
    pred: nn.Module = predictor
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        enc = DistributedDataParallel(encoder, device_ids=ids)
        pred = DistributedDataParallel(predictor, device_ids=ids)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.04)
    scaler = run.grad_scaler()
    timed = TimedIterator(batches(), batch_size_fn=len, device=device)
    try:
        for clips in timed:
            loss = loss_of(clips, enc, pred)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            ema_update(target, encoder, args.momentum)
            timed.record_loss(loss)
    finally:
        enc = pred = opt = timed = None  # noqa: F841 - DDP's reducers go before the group
        teardown_distributed()


if __name__ == "__main__":
    main()
