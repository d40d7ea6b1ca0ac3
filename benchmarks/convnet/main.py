"""Train a ResNet-style classifier on a JPEG folder (or on synthetic tensors).

With a dataset (``convnet``), images are decoded by Pillow inside the worker processes
of a real `torch.utils.data.DataLoader`, so the score includes the input pipeline, as a
real training job does. With ``--synthetic-data`` (``convnet-noio``), one random batch
is reused and only the model is measured. Throughput is images/s through
`benchkit.timing.TimedIterator`.

Runs by hand too: ``python prepare.py --data /tmp/d && python main.py --data /tmp/d``.
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from model import ResNet

from benchkit.exiting import run_and_exit
from benchkit.shm import loader_prefetch
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, optimizer_step, setup
from benchshared.datasets import data_dir
from benchshared.vision import class_samples


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default=None, help="image folder (default: $MILABENCH_DIR_DATA/convnet-jpeg)"
    )
    parser.add_argument(
        "--synthetic-data", action="store_true", help="no I/O: reuse one random batch"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--width", type=int, default=32, help="channels of the first stage")
    parser.add_argument("--blocks", default="1,1,1,1", help="basic blocks per stage")
    parser.add_argument("--classes", type=int, default=10, help="classes when synthetic")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1000, help="upper bound; the budget ends it")
    parser.add_argument("--lr", type=float, default=0.05)
    add_common_arguments(parser, precisions=["fp32", "bf16", "fp16", "tf32"])
    return parser.parse_args(argv)


class ImageFolder(torch.utils.data.Dataset):
    """``root/<class>/<image>`` decoded with Pillow, as uint8 CHW tensors.

    Normalisation happens on the device in the training loop (cheaper than in workers).
    """

    def __init__(self, root: str | os.PathLike, image_size: int) -> None:
        self.root = Path(root)
        self.samples, self.num_classes = class_samples(self.root)
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        path, label = self.samples[index]
        with Image.open(path) as img:
            img = img.convert("RGB")
            if img.size != (self.image_size, self.image_size):
                img = img.resize((self.image_size, self.image_size))
            if torch.rand(()) < 0.5:
                img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            data = bytearray(img.tobytes())
        pixels = torch.frombuffer(data, dtype=torch.uint8)
        return pixels.view(self.image_size, self.image_size, 3).permute(2, 0, 1), label


def make_loader(args: argparse.Namespace) -> tuple[torch.utils.data.DataLoader, int]:
    dataset = ImageFolder(args.data or data_dir("convnet-jpeg"), args.image_size)
    batch_bytes = args.batch_size * (3 * args.image_size**2 + 8)  # uint8 images, int64 labels
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
        pin_memory=torch.cuda.is_available(),
        prefetch_factor=loader_prefetch(batch_bytes, args.num_workers, 4, label="convnet"),
    )
    return loader, dataset.num_classes


def synthetic_batches(args: argparse.Namespace):
    """The same random batch forever (as uint8, like decoded images)."""
    gen = torch.Generator().manual_seed(args.seed)
    images = torch.randint(
        0,
        256,
        (args.batch_size, 3, args.image_size, args.image_size),
        dtype=torch.uint8,
        generator=gen,
    )
    labels = torch.randint(0, args.classes, (args.batch_size,), generator=gen)
    return itertools.repeat((images, labels))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args, cudnn_benchmark=True)
    device = run.device

    if args.synthetic_data:
        batches, num_classes = synthetic_batches(args), args.classes
        epochs = 1  # an endless iterator: the budget ends it
    else:
        batches, num_classes = make_loader(args)
        epochs = args.epochs

    blocks = tuple(int(b) for b in args.blocks.split(","))
    model = ResNet(num_classes, args.width, blocks, small_input=args.image_size < 128).to(device)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = run.grad_scaler()
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    print(
        f"convnet: {'synthetic' if args.synthetic_data else 'jpeg'} data, batch {args.batch_size}, "
        f"{args.image_size}px, width {args.width}, blocks {blocks}, {args.precision} on {device}, "
        f"{torch.get_num_threads()} threads, {args.num_workers} workers",
        flush=True,
    )

    timed = TimedIterator(batches, batch_size_fn=lambda b: len(b[1]), device=device)
    model.train()
    for _epoch in range(epochs):
        for images, labels in timed:
            images = images.to(device, non_blocking=True).float().sub_(mean).div_(std)
            images = images.contiguous(memory_format=torch.channels_last)
            labels = labels.to(device, non_blocking=True)
            with run.autocast():
                loss = F.cross_entropy(model(images), labels)
            optimizer_step(loss, opt, scaler)
            timed.record_loss(loss)
        if timed.done:
            break


if __name__ == "__main__":
    run_and_exit(main)
