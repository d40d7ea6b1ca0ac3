"""Train a torchvision classification model (resnet50, convnext_large, ...) on GPU.

The standard suite's vision workloads. With ``--data`` (what ``prepare.py`` generates:
an ImageNet-style JPEG folder), images go through torchvision's ``ImageFolder`` and the
usual augmentation in a DataLoader with ``--num-workers`` processes; with
``--synthetic-data`` (the ``-noio`` entries) random tensors are made on the device once
and reused (``--fixed-batch``), so only the model is measured. Weights are random.
Throughput: images/s, through `benchkit.timing.TimedIterator`.

``--precision``: ``fp32`` (TF32 off), ``tf32``, ``fp16``/``bf16`` (autocast), and
``tf32-fp16`` (TF32 for what stays in fp32, fp16 autocast for the rest).
"""

from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn.functional as F

from benchkit.datasets import data_dir
from benchkit.timing import TimedIterator
from benchkit.torchsetup import PRECISIONS, add_common_arguments, optimizer_step, setup


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="any torchvision.models name")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--data", default=None, help="default: $MILABENCH_DIR_DATA/FakeImageNet")
    parser.add_argument("--synthetic-data", action="store_true")
    parser.add_argument(
        "--fixed-batch", action="store_true", help="reuse one batch (with --synthetic-data)"
    )
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--no-stdout", action="store_true", help="accepted for upstream suites")
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"])
    return parser.parse_args(argv)


def make_loader(args: argparse.Namespace, device: torch.device):
    if args.synthetic_data:
        gen = torch.Generator().manual_seed(args.seed)
        images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen)
        labels = torch.randint(0, args.classes, (args.batch_size,), generator=gen)
        batch = (images.to(device), labels.to(device))
        if args.fixed_batch:
            return itertools.repeat(batch), 1
        return (tuple(t.clone() for t in batch) for _ in itertools.count()), 1
    from torchvision import datasets, transforms

    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    dataset = datasets.ImageFolder(
        args.data or data_dir("FakeImageNet"),
        transforms.Compose(
            [
                transforms.RandomResizedCrop(args.image_size),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                normalize,
            ]
        ),
    )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.num_workers,
        pin_memory=device.type == "cuda",
        persistent_workers=args.num_workers > 0,
    )
    return loader, args.epochs


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torchvision

    run = setup(args, cudnn_benchmark=True)
    device = run.device

    model = torchvision.models.get_model(args.model, weights=None, num_classes=args.classes)
    model = model.to(device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scaler = run.grad_scaler()
    batches, epochs = make_loader(args, device)
    print(
        f"torchvision: {args.model}, batch {args.batch_size}, {args.precision}, "
        f"{'synthetic' if args.synthetic_data else 'jpeg'} data on {device}",
        flush=True,
    )

    timed = TimedIterator(batches, batch_size_fn=lambda b: len(b[1]), device=device)
    model.train()
    for _epoch in range(epochs):
        for images, labels in timed:
            images = images.to(device, non_blocking=True).contiguous(memory_format=memory_format)
            labels = labels.to(device, non_blocking=True)
            with run.autocast():
                loss = F.cross_entropy(model(images), labels)
            optimizer_step(loss, opt, scaler)
            timed.record_loss(loss)
        if timed.done:
            break


if __name__ == "__main__":
    main()
