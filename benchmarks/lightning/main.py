"""Image classification trained by a Lightning ``Trainer``: what a team that trains with
Lightning gets from the machine, framework overhead included.

The standard suite's ``lightning`` (one process per GPU) and ``lightning-gpus`` (DDP over
the GPUs of the node) entries: torchvision's resnet152 (upstream's backbone) with random
weights, on the JPEG folder of ``prepare.py``, batch 256 per device. The loader, the
synthetic batches and the model factory are `benchshared.vision`'s (shared with the
torchvision benchmark), so ``--model-source plain`` runs the same Trainer loop where
torchvision cannot be imported. Upstream milabench's step (docs/parity.md): Adam at lr
1e-3 (``--optimizer adam``, the default), ``bf16-mixed`` with TF32 on (``--precision
tf32-bf16``), images normalised in the loader workers (``--normalise-in-workers``).

Measurement: the Trainer iterates a `TimedIterator` over the loader, so a step is
everything Lightning does between two batches (forward, backward, optimiser, hooks);
the window ends the iteration, which ends the epoch and the fit. Under torchrun, Lightning
finds the torchelastic environment and runs DDP with ``--backend``; rank 0 reports the
global images/s. Lightning's logging, progress bar, checkpoints and model summary are off.
"""

from __future__ import annotations

import argparse
import gc
import os
from typing import Any

import torch
import torch.nn.functional as F

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import PRECISIONS, add_common_arguments, requested_device, setup
from benchshared.vision import SOURCES, build_model, image_batches, normalise, synthetic_batches

LIGHTNING_PRECISION = {
    "fp32": "32-true",
    "tf32": "32-true",
    "fp16": "16-mixed",
    "tf32-fp16": "16-mixed",
    "bf16": "bf16-mixed",
    "tf32-bf16": "bf16-mixed",  # TF32 on (benchkit.torchsetup.setup), as upstream's
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet152")
    parser.add_argument("--model-source", choices=SOURCES, default="torchvision")
    parser.add_argument("--batch-size", type=int, default=256, help="per device")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--data", default=None, help="default: $MILABENCH_DIR_DATA/FakeImageNet")
    parser.add_argument("--synthetic-data", action="store_true")
    # prepare.py's options (the same argv reaches both scripts): accepted, unused here
    parser.add_argument("--images-per-class", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source-size", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1000, help="passes over the folder")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--optimizer",
        choices=["adam", "sgd"],
        default="adam",
        help="adam: torch.optim.Adam (upstream's); sgd: SGD, momentum 0.9, weight decay 1e-4",
    )
    parser.add_argument(
        "--normalise-in-workers",
        action="store_true",
        help="float32 images normalised in the loader workers (default: uint8 images "
        "normalised on the device in training_step)",
    )
    parser.add_argument("--backend", default=None, help="collectives under torchrun")
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16", "tf32-bf16"])
    return parser.parse_args(argv)


def make_optimizer(params: Any, args: argparse.Namespace) -> torch.optim.Optimizer:
    """``--optimizer``: Adam (upstream's ``torch.optim.Adam(self.parameters(), lr=1e-3)``)
    or SGD with momentum 0.9 and weight decay 1e-4."""
    if args.optimizer == "adam":
        return torch.optim.Adam(params, lr=args.lr)
    return torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)


def make_module(model: torch.nn.Module, args: argparse.Namespace, batches: Any) -> Any:
    import lightning as L

    prepare = (lambda images: images) if args.normalise_in_workers else normalise

    class Classifier(L.LightningModule):
        """The model, its optimiser, and a train dataloader that is the timed batch
        stream."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.timed: TimedIterator | None = None

        def train_dataloader(self) -> Any:
            # Built here, after Lightning set up the process group, so that the timed
            # iterator sums the batch sizes of every rank.
            self.timed = TimedIterator(
                batches, batch_size_fn=lambda b: len(b[1]), device=self.device
            )
            return self.timed

        def training_step(self, batch: Any, _index: int) -> torch.Tensor:
            images, labels = batch
            loss = F.cross_entropy(self.model(prepare(images)), labels)
            self.timed.record_loss(loss)
            return loss

        def configure_optimizers(self) -> Any:
            return make_optimizer(self.parameters(), args)

    return Classifier()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import lightning as L
    from lightning.pytorch.strategies import DDPStrategy

    kind = requested_device(args)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    device = torch.device(kind, int(os.environ.get("LOCAL_RANK", 0))) if kind != "cpu" else None
    run = setup(args, device=device or torch.device("cpu"))
    check_memory(__file__, args, run.device)  # skips, with the numbers, if it cannot fit

    model = build_model(args.model_source, args.model, args.classes)
    batches = image_batches(args, device="cpu", rank=rank, world=world)  # moved by Lightning
    sample = synthetic_batches(
        2, args.image_size, args.classes, 0, "cpu", True, normal=args.normalise_in_workers
    )
    images, labels = next(sample)
    prepare = (lambda x: x) if args.normalise_in_workers else normalise

    def one_step() -> None:
        with run.autocast():
            F.cross_entropy(model(prepare(images)), labels).backward()

    count_and_declare(one_step, 2, precision=args.precision)  # rank 0 declares
    model.zero_grad(set_to_none=True)

    strategy: Any = "auto"
    if world > 1:
        strategy = DDPStrategy(process_group_backend=args.backend)
    trainer = L.Trainer(
        accelerator="cpu" if kind == "cpu" else "gpu",
        devices=local_world if world > 1 else 1,
        num_nodes=max(1, world // local_world),
        strategy=strategy,
        precision=LIGHTNING_PRECISION[args.precision],
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    if rank == 0:
        print(
            f"lightning: {args.model_source} {args.model}, batch {args.batch_size} per device "
            f"x {world}, {args.precision} ({LIGHTNING_PRECISION[args.precision]}) on {kind}",
            flush=True,
        )
    try:
        trainer.fit(make_module(model, args, batches))
    finally:
        trainer = None
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            gc.collect()
            dist.destroy_process_group()


if __name__ == "__main__":
    run_and_exit(main)
