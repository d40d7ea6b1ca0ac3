"""Image classification trained by a Lightning ``Trainer``: what a team that trains with
Lightning gets from the machine, framework overhead included.

The standard suite's ``lightning`` (one process per GPU) and ``lightning-gpus`` (DDP over
the GPUs of the node) entries: torchvision's resnet152 (upstream's backbone) with random
weights, on the JPEG folder of ``prepare.py``, batch 256 per device. The loader, the
synthetic batches and the model factory are `benchkit.vision`'s (shared with the
torchvision benchmark), so ``--model-source plain`` runs the same Trainer loop where
torchvision cannot be imported.

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

from benchkit.flops import count_and_declare
from benchkit.timing import TimedIterator
from benchkit.torchsetup import PRECISIONS, add_common_arguments, default_device, setup
from benchkit.vision import SOURCES, build_model, image_batches, normalise, synthetic_batches

LIGHTNING_PRECISION = {
    "fp32": "32-true",
    "tf32": "32-true",
    "fp16": "16-mixed",
    "tf32-fp16": "16-mixed",
    "bf16": "bf16-mixed",
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
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--backend", default=None, help="collectives under torchrun")
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"])
    return parser.parse_args(argv)


def make_module(model: torch.nn.Module, lr: float, batches: Any) -> Any:
    import lightning as L

    class Classifier(L.LightningModule):
        """The model, SGD, and a train dataloader that is the timed batch stream."""

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
            loss = F.cross_entropy(self.model(normalise(images)), labels)
            self.timed.record_loss(loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)

    return Classifier()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import lightning as L
    from lightning.pytorch.strategies import DDPStrategy

    kind = args.device or default_device()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    device = torch.device(kind, int(os.environ.get("LOCAL_RANK", 0))) if kind != "cpu" else None
    run = setup(args, device=device or torch.device("cpu"))

    model = build_model(args.model_source, args.model, args.classes)
    batches = image_batches(args, device="cpu", rank=rank, world=world)  # moved by Lightning
    images, labels = next(synthetic_batches(2, args.image_size, args.classes, 0, "cpu", True))

    def one_step() -> None:
        with run.autocast():
            F.cross_entropy(model(normalise(images)), labels).backward()

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
        trainer.fit(make_module(model, args.lr, batches))
    finally:
        trainer = None
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            gc.collect()
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
