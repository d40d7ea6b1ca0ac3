"""DINOv2 self-supervised training step on a ViT-g/14, in plain torch: student and EMA
teacher, multi-crop, DINO head with centring and sharpening.

The standard suite's dinov2-giant-single / -gpus / -nodes entries. facebookresearch's
dinov2 repository is not on the package registries; this is its computational shape
(`benchkit.vit`): ViT-g/14 (embed 1536, 40 blocks, 24 heads, SwiGLU 4096), images of
the JPEG folder of ``prepare.py`` decoded at the global crop size by DataLoader workers,
then per image 2 global crops (224 px: the image and its mirror) and ``--local-crops``
(8) random crops resized to 98 px on the device. The teacher (an EMA of the student, no
gradient) sees the global crops; the student sees all crops; both project their CLS
token through a DINO head (MLP 2048-2048-256, then 65536 prototypes); the loss is the
cross-entropy between the teacher's centred, sharpened (temperature 0.04) distribution
and the student's (0.1) over every teacher-global x other-student-crop pair; AdamW;
the teacher and the centre follow by EMA after each step. (DINOv2's iBOT masked-patch
loss and KoLeo regulariser are left out: they add a few percent of the work.)

Throughput: images/s (an image = its 2 + 8 crops). Under torchrun the student is wrapped
in DDP and rank 0 reports the global rate. ``--arch tiny`` for CPUs.
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F
from torch import nn

from benchkit.flops import count_and_declare
from benchkit.timing import TimedIterator
from benchkit.torchsetup import (
    PRECISIONS,
    add_common_arguments,
    init_distributed,
    setup,
    teardown_distributed,
)
from benchkit.vision import image_batches, normalise, synthetic_batches
from benchkit.vit import ARCHES, build_vit, ema_update


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(ARCHES), default="giant")
    parser.add_argument("--patch", type=int, default=14)
    parser.add_argument("--batch-size", type=int, default=32, help="images per device")
    parser.add_argument("--global-size", type=int, default=224)
    parser.add_argument("--local-size", type=int, default=98)
    parser.add_argument("--local-crops", type=int, default=8)
    parser.add_argument("--prototypes", type=int, default=65536)
    parser.add_argument("--head-hidden", type=int, default=2048)
    parser.add_argument("--momentum", type=float, default=0.994, help="teacher EMA")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--data", default=None, help="default: $MILABENCH_DIR_DATA/FakeImageNet")
    parser.add_argument("--synthetic-data", action="store_true")
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--backend", default=None, help="collectives under torchrun")
    # prepare.py's options (the same argv reaches both scripts): accepted, unused here
    parser.add_argument("--classes", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--images-per-class", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source-size", type=int, default=None, help=argparse.SUPPRESS)
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"], default_precision="bf16")
    return parser.parse_args(argv)


class DinoHead(nn.Module):
    """MLP to a 256-wide bottleneck, L2-normalised, then the prototypes."""

    def __init__(self, dim: int, hidden: int, prototypes: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, 256),
        )  # fmt: skip
        self.last = nn.Linear(256, prototypes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(F.normalize(self.mlp(x), dim=-1))


class Dino(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        tokens = (args.global_size // args.patch) ** 2
        self.backbone = build_vit(
            args.arch, patch=args.patch, cls_token=True, max_tokens=tokens,
            checkpointing=args.gradient_checkpointing,
        )  # fmt: skip
        self.head = DinoHead(self.backbone.dim, args.head_hidden, args.prototypes)

    def forward(self, crops: list[torch.Tensor]) -> list[torch.Tensor]:
        return [self.head(self.backbone(c)[:, 0]) for c in crops]


def multi_crop(images: torch.Tensor, args: argparse.Namespace) -> list[torch.Tensor]:
    """2 global crops (the image, its mirror) and the local crops, on the device."""
    x = normalise(images)
    crops = [x, x.flip(-1)]
    size = x.shape[-1]
    for _ in range(args.local_crops):
        side = int(size * torch.empty(()).uniform_(0.35, 0.6).item())
        i, j = torch.randint(0, size - side + 1, (2,)).tolist()
        patch = x[..., i : i + side, j : j + side]
        crops.append(F.interpolate(patch, size=args.local_size, mode="bilinear"))
    return crops


def dino_loss(student: list, teacher: list, center: torch.Tensor) -> torch.Tensor:
    targets = [F.softmax((t - center) / 0.04, dim=-1) for t in teacher]
    total, pairs = 0.0, 0
    for ti, target in enumerate(targets):
        for si, s in enumerate(student):
            if si == ti:
                continue
            total = total + torch.sum(-target * F.log_softmax(s / 0.1, dim=-1), dim=-1).mean()
            pairs += 1
    return total / pairs


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    run = setup(args, device=device)
    student = Dino(args).to(device)
    teacher = copy.deepcopy(student).requires_grad_(False)
    center = torch.zeros(1, args.prototypes, device=device)
    batches = image_batches(
        args, device=device, rank=rank, world=world, image_size=args.global_size
    )
    if rank == 0:
        n = sum(p.numel() for p in student.backbone.parameters())
        print(
            f"dinov2: ViT-{args.arch}/{args.patch} ({n / 1e6:.1f}M parameters), batch "
            f"{args.batch_size} x {world}, 2 x {args.global_size} + {args.local_crops} x "
            f"{args.local_size} px crops, {args.precision} on {device}",
            flush=True,
        )

    def loss_of(images: torch.Tensor, net: nn.Module) -> torch.Tensor:
        crops = multi_crop(images.to(device, non_blocking=True), args)
        with run.autocast():
            with torch.no_grad():
                t = teacher(crops[:2])
            s = net(crops)
            loss = dino_loss([x.float() for x in s], [x.float() for x in t], center)
        with torch.no_grad():
            batch_center = torch.cat(t).float().mean(0, keepdim=True)
            center.mul_(0.9).add_(batch_center, alpha=0.1)
        return loss

    sample = next(synthetic_batches(2, args.global_size, 10, 0, device, True))[0]
    count_and_declare(lambda: loss_of(sample, student).backward(), 2, precision=args.precision)
    student.zero_grad(set_to_none=True)
    net: nn.Module = student
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(
            student, device_ids=[device.index] if device.type == "cuda" else None
        )
    opt = torch.optim.AdamW(student.parameters(), lr=args.lr, weight_decay=0.04)
    scaler = run.grad_scaler()
    timed = TimedIterator(batches, batch_size_fn=lambda b: len(b[0]), device=device)
    try:
        for images, _labels in timed:
            loss = loss_of(images, net)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            ema_update(teacher, student, args.momentum)
            timed.record_loss(loss)
    finally:
        net = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


if __name__ == "__main__":
    main()
