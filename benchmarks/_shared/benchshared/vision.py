"""Image classification pieces shared by the vision benchmarks (torchvision, timm,
Lightning): the JPEG folder loader, the synthetic batches and the model factory.

Why here: the standard suite's torchvision and timm models cannot be imported on every
machine (a CPU-only torch next to a CUDA build of torchvision fails at import), yet their
data pipeline and training step must still be exercised where they cannot run. So the
loader (Pillow decode, random resized crop and flip in the DataLoader workers, written
without torchvision), the synthetic batches and the model factory live here, and every
vision entry uses them: with ``--model-source plain`` (a ResNet written in plain torch)
the same code runs on any machine. torch, torchvision and timm are imported lazily
(benchshared's rule: this module imports with the standard library only).
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


def class_samples(root: Path) -> tuple[list[tuple[str, int]], int]:
    """The images of ``root/<class>/<image>`` as (path, label) in a stable order (classes
    and files sorted by name), and the number of classes; exits with one line when there
    are none."""
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    samples = [
        (str(f), label)
        for label, name in enumerate(classes)
        for f in sorted((root / name).iterdir())
        if f.suffix.lower() in IMAGE_SUFFIXES
    ]
    if not samples:
        raise SystemExit(f"no images under {root}: run prepare.py first")
    return samples, len(classes)


class JpegFolder:
    """``root/<class>/<image>``: a random resized crop (scale 0.08-1, ratio 3/4-4/3) and a
    horizontal flip, decoded with Pillow: torchvision's training recipe without
    torchvision.

    Output: uint8 CHW tensors, normalised later on the device (`normalise`), unless
    ``normalise`` is set: then float32 CHW tensors normalised with the ImageNet mean and
    std here, in the loader worker, as torchvision's ``ToTensor`` + ``Normalize`` do
    (upstream milabench's torchvision and Lightning loaders). timm's training recipe
    (upstream's focalnet) adds ``color_jitter`` (brightness, contrast and saturation
    factors drawn from [1 - j, 1 + j], applied in a random order, after the flip: timm's
    ``--color-jitter``) and ``random_interpolation`` (the crop resampled with bilinear or
    bicubic filtering, drawn per image: timm's ``--train-interpolation random``)."""

    def __init__(
        self,
        root: str | os.PathLike,
        image_size: int,
        *,
        normalise: bool = False,
        color_jitter: float = 0.0,
        random_interpolation: bool = False,
    ) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise SystemExit(f"no image folder at {self.root}: run prepare.py first")
        self.samples, self.num_classes = class_samples(self.root)
        self.image_size = image_size
        self.normalise = normalise
        self.color_jitter = color_jitter
        self.random_interpolation = random_interpolation

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
            resample = Image.Resampling.BILINEAR
            if self.random_interpolation:
                resample = rng.choice((Image.Resampling.BILINEAR, Image.Resampling.BICUBIC))
            img = img.crop(box).resize(size, resample)  # torchvision's resized_crop on PIL
            if rng.random() < 0.5:
                img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            if self.color_jitter > 0:
                img = jitter_colours(img, self.color_jitter, rng)
            data = bytearray(img.tobytes())
        pixels = torch.frombuffer(data, dtype=torch.uint8)
        chw = pixels.view(self.image_size, self.image_size, 3).permute(2, 0, 1)
        if not self.normalise:
            return chw, label
        image = chw.contiguous().to(dtype=torch.float32).div(255)  # ToTensor
        mean = torch.tensor(MEAN).view(3, 1, 1)
        std = torch.tensor(STD).view(3, 1, 1)
        return image.sub(mean).div_(std), label  # Normalize (on a copy, as its default)


def jitter_colours(img: Any, strength: float, rng: random.Random) -> Any:
    """torchvision's ``ColorJitter(strength, strength, strength)`` on a PIL image (what
    timm's ``--color-jitter`` builds): brightness, contrast and saturation factors drawn
    uniformly from [max(0, 1 - strength), 1 + strength], applied in a random order with
    Pillow's ``ImageEnhance`` (what torchvision calls on PIL images); no hue change."""
    from PIL import ImageEnhance

    low, high = max(0.0, 1 - strength), 1 + strength
    factors = [rng.uniform(low, high) for _ in range(3)]
    enhancers = (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color)
    for index in rng.sample(range(3), 3):
        img = enhancers[index](img).enhance(factors[index])
    return img


def jpeg_loader(
    root: str | os.PathLike,
    *,
    image_size: int,
    batch_size: int,
    num_workers: int,
    rank: int = 0,
    world: int = 1,
    seed: int = 0,
    normalise: bool = False,
    color_jitter: float = 0.0,
    random_interpolation: bool = False,
) -> Any:
    """A DataLoader over `JpegFolder` (its options: ``normalise``, ``color_jitter``,
    ``random_interpolation``), each rank reading its own shard, its workers prefetching
    4 batches each, or fewer where /dev/shm cannot hold them (`benchkit.shm`)."""
    torch = _torch()
    dataset = JpegFolder(
        root,
        image_size,
        normalise=normalise,
        color_jitter=color_jitter,
        random_interpolation=random_interpolation,
    )
    sampler = None
    if world > 1:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(dataset, world, rank, shuffle=True, seed=seed)
    from benchkit.shm import loader_prefetch

    pixels = 3 * image_size * image_size * (4 if normalise else 1)
    prefetch = loader_prefetch(batch_size * (pixels + 8), num_workers, 4, label="jpeg loader")
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        drop_last=True,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        pin_memory=torch.cuda.is_available(),
        prefetch_factor=prefetch,
    )


def epochs(loader: Any, count: int) -> Any:
    """The loader's batches over ``count`` epochs (the window ends it well before)."""
    sampler = getattr(loader, "sampler", None)
    for epoch in range(count):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        yield from loader


def synthetic_batches(
    batch_size: int,
    image_size: int,
    classes: int,
    seed: int,
    device: Any,
    fixed: bool,
    *,
    normal: bool = False,
    soft_targets: bool = False,
) -> Any:
    """Images and targets made once on the device: the same batch forever (``fixed``,
    upstream's ``synthetic_fixed``) or fresh copies of it.

    Images: uint8 (normalised later by `normalise`), or with ``normal`` float32 drawn from
    the standard normal distribution (already the scale of normalised images). Targets:
    class indices, or with ``soft_targets`` a ``[batch, classes]`` float32 tensor of
    uniform random values in [0, 1), which ``cross_entropy`` takes as class probabilities
    (upstream's ``generate_tensor_classification``: ``randn`` inputs, ``rand_like`` of
    the model's output as targets)."""
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, 3, image_size, image_size)
    if normal:
        images = torch.randn(shape, generator=gen).to(device)
    else:
        images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen).to(device)
    if soft_targets:
        labels = torch.rand((batch_size, classes), generator=gen).to(device)
    else:
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
    ``device`` (``--synthetic-data``, ``--fixed-batch``, ``--soft-targets``) or this
    rank's share of the JPEG folder (``--data``, default
    ``$MILABENCH_DIR_DATA/FakeImageNet``; ``--color-jitter``, ``--random-interpolation``)
    for ``--epochs``. ``--normalise-in-workers``: float32 images, normalised by the
    loader workers (standard-normal ones with ``--synthetic-data``); else uint8.
    Options a benchmark does not have are off."""
    from benchshared.datasets import data_dir

    size = image_size or args.image_size
    in_workers = getattr(args, "normalise_in_workers", False)
    if getattr(args, "synthetic_data", False):
        return synthetic_batches(
            args.batch_size, size, getattr(args, "classes", 10), args.seed + rank, device,
            getattr(args, "fixed_batch", False), normal=in_workers,
            soft_targets=getattr(args, "soft_targets", False),
        )  # fmt: skip
    loader = jpeg_loader(
        args.data or data_dir(folder),
        image_size=size,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        rank=rank,
        world=world,
        seed=args.seed,
        normalise=in_workers,
        color_jitter=getattr(args, "color_jitter", 0.0) or 0.0,
        random_interpolation=getattr(args, "random_interpolation", False),
    )
    return epochs(loader, getattr(args, "epochs", 100_000))


def classifier_footprint(
    args: Any, world: int, ranks_per_node: int, *, channels_last: bool = False
) -> Any:
    """Memory of training an image classifier of ``args`` (``--model-source --model
    --classes --batch-size --image-size --precision``) with its optimiser
    (`optimizer_kind`), data-parallel over ``world`` ranks: `benchkit.memory.estimate` of
    the model built on the meta device and one forward + backward of a batch (the
    torchvision and Lightning entries)."""
    from benchkit.memory import Workload, estimate

    torch = _torch()

    def make() -> Workload:
        try:
            with torch.device("meta"):
                model = build_model(args.model_source, args.model, args.classes)
        except NotImplementedError as exc:
            # a builder that reads tensors it computes (torchvision's RegNets:
            # `torch.pow(...).int().tolist()` for the block widths) cannot run on the meta
            # device: built on the host, as the run builds it, then moved there
            if "meta" not in str(exc):
                raise
            model = build_model(args.model_source, args.model, args.classes).to("meta")
        model.train()
        fmt = torch.channels_last if channels_last else torch.contiguous_format

        def step() -> None:
            size = args.image_size
            images = torch.zeros(args.batch_size, 3, size, size).contiguous(memory_format=fmt)
            labels = torch.zeros(args.batch_size, dtype=torch.long)
            torch.nn.functional.cross_entropy(model(images), labels).backward()

        return Workload([model], step)

    return estimate(
        make,
        precision=args.precision,
        optimizer=optimizer_kind(args),
        parallel="ddp" if world > 1 else "none",
        world=world,
        ranks_per_node=ranks_per_node,
    )


def optimizer_kind(args: Any) -> str:
    """The `benchkit.memory` optimiser of a classifier's options: ``adam`` for
    ``--optimizer adam`` (Lightning's default), ``sgd-momentum`` for SGD with a momentum
    buffer (``--momentum`` > 0, or Lightning's ``--optimizer sgd``), else plain ``sgd``."""
    kind = getattr(args, "optimizer", None)
    if kind == "adam":
        return "adam"
    if kind == "sgd" or (getattr(args, "momentum", 0) or 0) > 0:
        return "sgd-momentum"
    return "sgd"
