"""Train an image classification model (torchvision's, timm's or a plain-torch ResNet)
on a JPEG folder or on synthetic batches, on one device or data-parallel under torchrun.

The standard suite's vision workloads: resnet50 (+ -noio), convnext_large in four
precisions, regnet_y_128gf, focalnet (timm), resnet152-ddp-gpus. With ``--data`` (what
``prepare.py`` generates: an ImageNet-style JPEG folder) images are decoded and cropped
by DataLoader workers (`benchkit.vision.JpegFolder`: Pillow, random resized crop, flip);
with ``--synthetic-data`` (the ``-noio`` entries) random batches are made on the device
once (``--fixed-batch``: the same one forever). Weights are random. Throughput: images/s
of the whole job, through `benchkit.timing.TimedIterator`.

``--model-source``: ``torchvision`` (default) or ``timm`` build the model by name;
``plain`` builds `benchkit.vision.plain_resnet` so that the same loader and training step
run where torchvision or timm cannot be imported (the CPU smoke suite).
``--precision``: ``fp32`` (TF32 off), ``tf32``, ``fp16``/``bf16`` (autocast), and
``tf32-fp16`` (TF32 for what stays in fp32, fp16 autocast for the rest).
Under torchrun (``WORLD_SIZE`` set) the model is wrapped in DistributedDataParallel over
``--backend`` and each rank reads its shard of the folder.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from benchkit.flops import count_and_declare
from benchkit.timing import TimedIterator
from benchkit.torchsetup import (
    PRECISIONS,
    add_common_arguments,
    init_distributed,
    optimizer_step,
    setup,
    teardown_distributed,
)
from benchkit.vision import SOURCES, build_model, image_batches, normalise, synthetic_batches


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="a model name of --model-source")
    parser.add_argument("--model-source", choices=SOURCES, default="torchvision")
    parser.add_argument("--batch-size", type=int, default=64, help="per device")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--data", default=None, help="default: $MILABENCH_DIR_DATA/FakeImageNet")
    parser.add_argument("--synthetic-data", action="store_true")
    # prepare.py's options (the same argv reaches both scripts): accepted, unused here
    parser.add_argument("--images-per-class", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source-size", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--fixed-batch", action="store_true", help="reuse one batch (with --synthetic-data)"
    )
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--backend", default=None, help="collectives under torchrun")
    parser.add_argument("--no-stdout", action="store_true", help="accepted for upstream suites")
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    run = setup(args, device=device, cudnn_benchmark=True)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format

    model = build_model(args.model_source, args.model, args.classes)
    model = model.to(device, memory_format=memory_format)
    batches = image_batches(args, device=device, rank=rank, world=world)
    if rank == 0:
        print(
            f"torchvision: {args.model_source} {args.model}, batch {args.batch_size} per "
            f"device x {world}, {args.precision}, "
            f"{'synthetic' if args.synthetic_data else 'jpeg'} data on {device}",
            flush=True,
        )

    sample = synthetic_batches(2, args.image_size, args.classes, 0, device, True)
    images, labels = next(sample)

    def one_step() -> None:
        with run.autocast():
            F.cross_entropy(model(normalise(images, memory_format)), labels).backward()

    # One counted forward + backward on 2 images of the plain module (no collective).
    count_and_declare(one_step, 2, precision=args.precision)
    model.zero_grad(set_to_none=True)
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scaler = run.grad_scaler()
    timed = TimedIterator(batches, batch_size_fn=lambda b: len(b[1]), device=device)
    net.train()
    try:
        for images, labels in timed:
            images = normalise(images.to(device, non_blocking=True), memory_format)
            labels = labels.to(device, non_blocking=True)
            with run.autocast():
                loss = F.cross_entropy(net(images), labels)
            optimizer_step(loss, opt, scaler)
            timed.record_loss(loss)
    finally:
        net = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


if __name__ == "__main__":
    main()
