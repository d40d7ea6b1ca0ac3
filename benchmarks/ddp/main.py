"""Data-parallel training with DistributedDataParallel, launched by torchrun.

Every rank trains the same model on its own synthetic batches; gradients are averaged
with all-reduce through ``--backend`` (gloo on CPU, nccl on NVIDIA GPUs; milabench passes
``{ccl}``). `benchkit.timing.TimedIterator` sums the batch sizes over the ranks, so rank
0 reports the *global* throughput (samples/s of the whole job), which is what scales
with the number of devices and the speed of the interconnect.

Run by hand: ``torchrun --standalone --nproc-per-node=2 main.py``. Without torchrun it
runs as a single process (world size 1).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, optimizer_step, requested_device, setup


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=None, help="gloo, nccl, ... (default: by device)")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--lr", type=float, default=0.01)
    add_common_arguments(parser, threads_help="CPU threads per rank (default: CPUs / local ranks)")
    return parser.parse_args(argv)


def make_model(args: argparse.Namespace) -> nn.Module:
    layers: list[nn.Module] = []
    width = args.features
    for _ in range(args.layers):
        layers += [nn.Linear(width, args.hidden), nn.LayerNorm(args.hidden), nn.GELU()]
        width = args.hidden
    layers.append(nn.Linear(width, args.classes))
    return nn.Sequential(*layers)


def setup_distributed(args: argparse.Namespace) -> tuple[torch.device, int, int]:
    """Join the process group when launched by torchrun; pick this rank's device."""
    device_type = requested_device(args)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if device_type == "cpu":
        # Ranks share the CPUs: do not oversubscribe them.
        threads = args.threads or max(1, (os.cpu_count() or 1) // local_world)
        torch.set_num_threads(threads)
        device = torch.device("cpu")
    else:
        device = torch.device(device_type, local_rank)
        if device_type == "cuda":
            torch.cuda.set_device(device)
    if "WORLD_SIZE" in os.environ and not dist.is_initialized():
        backend = args.backend or ("nccl" if device_type == "cuda" else "gloo")
        dist.init_process_group(backend=backend)
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    return device, rank, world


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = setup_distributed(args)
    run = setup(args, device=device)  # the same seed: the same initial weights on every rank
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit

    model = make_model(args).to(device)
    # One counted forward + backward on the plain module (no collective), rank 0 declares.
    sample = torch.randn(args.batch_size, args.features, device=device)
    target = torch.zeros(args.batch_size, dtype=torch.long, device=device)

    def one_step() -> None:
        with run.autocast():
            F.cross_entropy(model(sample), target).backward()

    count_and_declare(one_step, args.batch_size, precision=args.precision)
    model.zero_grad(set_to_none=True)
    if world > 1:
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = run.grad_scaler()

    gen = torch.Generator().manual_seed(args.seed + 1 + rank)  # different data per rank
    pool = [
        (
            torch.randn(args.batch_size, args.features, generator=gen).to(device),
            torch.randint(0, args.classes, (args.batch_size,), generator=gen).to(device),
        )
        for _ in range(8)
    ]
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(
            f"ddp: world size {world}, {n_params / 1e6:.1f}M parameters, batch {args.batch_size} per rank, "
            f"{args.precision} on {device}, {torch.get_num_threads()} threads per rank, "
            f"backend {dist.get_backend() if dist.is_initialized() else 'none'}",
            flush=True,
        )

    timed = TimedIterator(itertools.cycle(pool), batch_size_fn=lambda b: len(b[1]), device=device)
    try:
        for x, y in timed:
            with run.autocast():
                loss = F.cross_entropy(model(x), y)
            optimizer_step(loss, opt, scaler)
            timed.record_loss(loss)
        if dist.is_initialized():
            # Leave together: a rank that tears down while its peer is still in a
            # collective makes gloo abort the peer.
            dist.barrier()
    finally:
        if dist.is_initialized():
            # Free DDP's reducer (its gloo work threads) before the group goes: a group
            # destroyed under a live reducer can abort the process at exit under load
            # ("terminate called without an active exception").
            model = opt = timed = None  # noqa: F841
            gc.collect()
            dist.destroy_process_group()


if __name__ == "__main__":
    run_and_exit(main)
