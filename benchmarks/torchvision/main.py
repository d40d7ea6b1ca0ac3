"""Train an image classification model (torchvision's, timm's or a plain-torch ResNet)
on a JPEG folder or on synthetic batches, on one device or data-parallel under torchrun.

The standard suite's vision workloads: resnet50 (+ -noio), convnext_large in four
precisions, regnet_y_128gf, focalnet (timm), resnet152-ddp-gpus. With ``--data`` (what
``prepare.py`` generates: an ImageNet-style JPEG folder) images are decoded and cropped
by DataLoader workers (`benchshared.vision.JpegFolder`: Pillow, random resized crop, flip);
with ``--synthetic-data`` (the ``-noio`` entries) random batches are made on the device
once (``--fixed-batch``: the same one forever). Weights are random. Throughput: images/s
of the whole job, through `benchkit.timing.TimedIterator`.

``--model-source``: ``torchvision`` (default) or ``timm`` build the model by name;
``plain`` builds `benchshared.vision.plain_resnet` so that the same loader and training step
run where torchvision or timm cannot be imported (the CPU smoke suite).
``--precision``: ``fp32`` (TF32 off), ``tf32``, ``fp16``/``bf16`` (autocast), and
``tf32-fp16`` / ``tf32-bf16`` (TF32 for what stays in fp32, fp16 / bf16 autocast for the
rest). Under torchrun (``WORLD_SIZE`` set) the model is wrapped in DistributedDataParallel
over ``--backend`` and each rank reads its shard of the folder.

The defaults are upstream milabench's torchvision scripts (docs/parity.md): plain SGD
(``SGD(params, lr)``: no momentum, no weight decay), cross-entropy on class indices,
cuDNN's autotuner off. The standard suite adds upstream's loader
(``--normalise-in-workers``: float32 images normalised in the workers, moved by one
blocking ``.to(device, dtype, memory_format)`` a step; ``--cast-inputs``: to the autocast
dtype, as upstream's single-GPU script does), the ``-noio`` entry's synthetic batch
(``--normalise-in-workers`` makes it standard-normal float32; ``--soft-targets``), and for
focalnet timm's ``train.py`` defaults (``--momentum 0.9 --nesterov --weight-decay 2e-5
--no-bias-decay --label-smoothing 0.1 --color-jitter 0.4 --random-interpolation
--cudnn-benchmark``, uint8 images normalised on the device as timm's prefetcher does).
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.nn.functional as F

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import (
    PRECISIONS,
    add_common_arguments,
    init_distributed,
    optimizer_step,
    setup,
    teardown_distributed,
)
from benchshared.vision import SOURCES, build_model, image_batches, normalise, synthetic_batches


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
    parser.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    parser.add_argument("--nesterov", action="store_true", help="Nesterov momentum")
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument(
        "--no-bias-decay",
        action="store_true",
        help="no weight decay on biases and other parameters of fewer than 2 dimensions "
        "(timm's filter)",
    )
    parser.add_argument("--label-smoothing", type=float, default=0.0)
    parser.add_argument(
        "--normalise-in-workers",
        action="store_true",
        help="float32 images normalised in the loader workers (standard-normal ones with "
        "--synthetic-data); default: uint8 images normalised on the device",
    )
    parser.add_argument(
        "--cast-inputs",
        action="store_true",
        help="with --normalise-in-workers: cast the images to the autocast dtype as they "
        "move to the device",
    )
    parser.add_argument(
        "--soft-targets",
        action="store_true",
        help="with --synthetic-data: uniform random [batch, classes] class probabilities "
        "as targets instead of class indices",
    )
    parser.add_argument(
        "--color-jitter", type=float, default=0.0, help="brightness/contrast/saturation"
    )
    parser.add_argument(
        "--random-interpolation", action="store_true", help="bilinear or bicubic crops"
    )
    parser.add_argument("--cudnn-benchmark", action="store_true", help="cuDNN's autotuner")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--backend", default=None, help="collectives under torchrun")
    parser.add_argument("--no-stdout", action="store_true", help="accepted for upstream suites")
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16", "tf32-bf16"])
    args = parser.parse_args(argv)
    if args.nesterov and args.momentum <= 0:
        parser.error("--nesterov needs --momentum > 0")
    return args


def make_optimizer(model: torch.nn.Module, args: argparse.Namespace) -> torch.optim.SGD:
    """``torch.optim.SGD`` of the options. With ``--no-bias-decay`` the parameters are
    split as timm's ``param_groups_weight_decay`` splits them: a group without weight
    decay (fewer than 2 dimensions, or named ``*.bias``), then the decayed group."""
    decay = args.weight_decay
    params: Any = [p for p in model.parameters() if p.requires_grad]
    if decay and args.no_bias_decay:
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        flat = [p for name, p in named if p.ndim <= 1 or name.endswith(".bias")]
        ids = {id(p) for p in flat}
        params = [
            {"params": flat, "weight_decay": 0.0},
            {"params": [p for _, p in named if id(p) not in ids], "weight_decay": decay},
        ]
        decay = 0.0
    return torch.optim.SGD(
        params, lr=args.lr, momentum=args.momentum, nesterov=args.nesterov, weight_decay=decay
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    run = setup(args, device=device, cudnn_benchmark=args.cudnn_benchmark)
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
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

    # --normalise-in-workers: the images come normalised (float32); one blocking move a
    # step, cast to the autocast dtype with --cast-inputs (upstream's torchvision scripts).
    in_dtype = (run.amp_dtype if args.cast_inputs else None) or torch.float32

    def to_device(images: torch.Tensor, targets: torch.Tensor) -> tuple[Any, Any]:
        if args.normalise_in_workers:
            images = images.to(device, dtype=in_dtype, memory_format=memory_format)
            return images, targets.to(device)
        images = normalise(images.to(device, non_blocking=True), memory_format)
        return images, targets.to(device, non_blocking=True)

    def loss_of(images: torch.Tensor, targets: torch.Tensor, net: Any) -> torch.Tensor:
        return F.cross_entropy(net(images), targets, label_smoothing=args.label_smoothing)

    sample = synthetic_batches(
        2, args.image_size, args.classes, 0, device, True,
        normal=args.normalise_in_workers, soft_targets=args.soft_targets,
    )  # fmt: skip
    images, labels = next(sample)

    def one_step() -> None:
        inputs, targets = to_device(images, labels)
        with run.autocast():
            loss_of(inputs, targets, model).backward()

    # One counted forward + backward on 2 images of the plain module (no collective).
    count_and_declare(one_step, 2, precision=args.precision)
    model.zero_grad(set_to_none=True)
    net = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    opt = make_optimizer(model, args)
    scaler = run.grad_scaler()
    timed = TimedIterator(batches, batch_size_fn=lambda b: len(b[1]), device=device)
    net.train()
    try:
        for images, labels in timed:
            images, labels = to_device(images, labels)
            with run.autocast():
                loss = loss_of(images, labels, net)
            optimizer_step(loss, opt, scaler)
            timed.record_loss(loss)
    finally:
        net = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


if __name__ == "__main__":
    run_and_exit(main)
