"""Image classification pieces shared by the vision benchmarks (torchvision, timm,
Lightning): the JPEG folder loader, the synthetic batches and the model factory.

Why here: the standard suite's torchvision and timm models cannot be imported on every
machine (a CPU-only torch next to a CUDA build of torchvision fails at import), yet their
data pipeline and training step must still be exercised where they cannot run. So the
loader (Pillow decode, random resized crop and flip in the DataLoader workers, written
without torchvision), the synthetic batches and the model factory live here, and every
vision entry uses them: with ``--model-source plain`` (a ResNet written in plain torch)
the same code runs on any machine. torch, torchvision and timm are imported lazily
(benchkit's rule: this module imports with the standard library only).
"""

from __future__ import annotations

import itertools
import math
import os
import random
from pathlib import Path
from typing import Any

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SOURCES = ("torchvision", "timm", "plain")


def _torch() -> Any:
    import torch

    return torch


class JpegFolder:
    """``root/<class>/<image>``: a random resized crop (scale 0.08-1, ratio 3/4-4/3) and a
    horizontal flip, decoded with Pillow into uint8 CHW tensors; normalisation happens on
    the device (`normalise`), cheaper than in the workers. The torchvision recipe,
    without torchvision."""

    def __init__(self, root: str | os.PathLike, image_size: int) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise SystemExit(f"no image folder at {self.root}: run prepare.py first")
        classes = sorted(p.name for p in self.root.iterdir() if p.is_dir())
        self.samples = [
            (str(f), label)
            for label, name in enumerate(classes)
            for f in sorted((self.root / name).iterdir())
            if f.suffix.lower() in IMAGE_SUFFIXES
        ]
        if not self.samples:
            raise SystemExit(f"no images under {self.root}: run prepare.py first")
        self.num_classes = len(classes)
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.samples)

    def crop_box(self, width: int, height: int, rng: random.Random) -> tuple[int, int, int, int]:
        area = width * height
        for _ in range(10):
            target = area * rng.uniform(0.08, 1.0)
            ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            w = int(round(math.sqrt(target * ratio)))
            h = int(round(math.sqrt(target / ratio)))
            if 0 < w <= width and 0 < h <= height:
                x, y = rng.randint(0, width - w), rng.randint(0, height - h)
                return x, y, x + w, y + h
        side = min(width, height)  # fallback: the central square
        x, y = (width - side) // 2, (height - side) // 2
        return x, y, x + side, y + side

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        torch = _torch()
        path, label = self.samples[index]
        rng = random.Random(torch.randint(0, 2**31, ()).item())  # per-worker seeded by torch
        with Image.open(path) as img:
            img = img.convert("RGB")
            box = self.crop_box(img.width, img.height, rng)
            size = (self.image_size, self.image_size)
            img = img.resize(size, Image.Resampling.BILINEAR, box=box)
            if rng.random() < 0.5:
                img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            data = bytearray(img.tobytes())
        pixels = torch.frombuffer(data, dtype=torch.uint8)
        return pixels.view(self.image_size, self.image_size, 3).permute(2, 0, 1), label


def jpeg_loader(
    root: str | os.PathLike,
    *,
    image_size: int,
    batch_size: int,
    num_workers: int,
    rank: int = 0,
    world: int = 1,
    seed: int = 0,
) -> Any:
    """A DataLoader over `JpegFolder`, each rank reading its own shard."""
    torch = _torch()
    dataset = JpegFolder(root, image_size)
    sampler = None
    if world > 1:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(dataset, world, rank, shuffle=True, seed=seed)
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        drop_last=True,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        pin_memory=torch.cuda.is_available(),
        prefetch_factor=4 if num_workers > 0 else None,
    )


def epochs(loader: Any, count: int) -> Any:
    """The loader's batches over ``count`` epochs (the window ends it well before)."""
    sampler = getattr(loader, "sampler", None)
    for epoch in range(count):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        yield from loader


def synthetic_batches(
    batch_size: int, image_size: int, classes: int, seed: int, device: Any, fixed: bool
) -> Any:
    """uint8 images and labels made once on the device: the same batch forever
    (``fixed``, upstream's ``synthetic_fixed``) or fresh copies of it."""
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, 3, image_size, image_size)
    images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen).to(device)
    labels = torch.randint(0, classes, (batch_size,), generator=gen).to(device)
    if fixed:
        return itertools.repeat((images, labels))
    return ((images.clone(), labels.clone()) for _ in itertools.count())


def normalise(images: Any, memory_format: Any = None) -> Any:
    """uint8 NCHW on the device -> normalised float (the workers only decode and crop)."""
    torch = _torch()
    mean = torch.tensor(MEAN, device=images.device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=images.device).view(1, 3, 1, 1) * 255
    out = (images.float() - mean) / std
    return out.contiguous(memory_format=memory_format) if memory_format is not None else out


# -- models ------------------------------------------------------------------------------


def build_model(source: str, name: str, classes: int) -> Any:
    """A classification model with random weights: torchvision's or timm's by name, or
    ``plain`` (`plain_resnet`, any machine). A library that cannot be imported is one
    line naming it and the way out, not a traceback."""
    if source == "plain":
        return plain_resnet(name, classes)
    try:
        if source == "torchvision":
            import torchvision

            return torchvision.models.get_model(name, weights=None, num_classes=classes)
        if source == "timm":
            import timm

            return timm.create_model(name, pretrained=False, num_classes=classes)
    except (ImportError, RuntimeError, OSError) as exc:
        if isinstance(exc, RuntimeError) and "operator" not in str(exc):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SystemExit(
            f"--model-source {source}: cannot import {source} here ({first}); "
            f"use --model-source plain to run the same loop with a plain-torch model"
        ) from None
    raise SystemExit(f"--model-source {source!r}: expected one of {', '.join(SOURCES)}")


PLAIN = {
    # name: (stem width, blocks per stage)
    "resnet-tiny": (16, (1, 1, 1, 1)),
    "resnet18": (64, (2, 2, 2, 2)),
    "resnet34": (64, (3, 4, 6, 3)),
}


def plain_resnet(name: str, classes: int) -> Any:
    """A ResNet of basic blocks in plain torch (``resnet-tiny``, ``resnet18``,
    ``resnet34``): the same layers as torchvision's, nothing to import."""
    torch = _torch()
    nn = torch.nn
    if name not in PLAIN:
        raise SystemExit(f"--model {name}: plain models are {', '.join(PLAIN)}")
    width, blocks = PLAIN[name]

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: Any) -> Any:
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.down is None else self.down(x)))

    layers: list[Any] = [
        nn.Conv2d(3, width, 7, 2, 3, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = width
    for stage, count in enumerate(blocks):
        cout = width * 2**stage
        for i in range(count):
            layers.append(Block(cin, cout, 2 if i == 0 and stage > 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def image_batches(
    args: Any,
    *,
    device: Any,
    rank: int = 0,
    world: int = 1,
    image_size: int | None = None,
    folder: str = "FakeImageNet",
) -> Any:
    """The batches of an image benchmark from its options: synthetic ones made on
    ``device`` (``--synthetic-data``, ``--fixed-batch``) or this rank's share of the JPEG
    folder (``--data``, default ``$MILABENCH_DIR_DATA/FakeImageNet``) for ``--epochs``."""
    from benchkit.datasets import data_dir

    size = image_size or args.image_size
    if getattr(args, "synthetic_data", False):
        return synthetic_batches(
            args.batch_size, size, getattr(args, "classes", 10), args.seed + rank, device,
            getattr(args, "fixed_batch", False),
        )  # fmt: skip
    loader = jpeg_loader(
        args.data or data_dir(folder),
        image_size=size,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        rank=rank,
        world=world,
        seed=args.seed,
    )
    return epochs(loader, getattr(args, "epochs", 100_000))
