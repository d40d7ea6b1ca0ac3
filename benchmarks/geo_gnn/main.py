"""Train a torch_geometric GNN (PNA or DimeNet) to regress a property of molecules.

The models are torch_geometric's own, with random weights: ``PNA`` (principal
neighbourhood aggregation over the bond graph: mean/min/max/std aggregators, identity/
amplification/attenuation degree scalers; upstream's shape is 64 layers of width 64) and
``DimeNet`` (directional message passing over a radius graph of the 3D positions, with
angle triplets; hidden 64, 6 blocks, 8 bilinear, 7 spherical, 6 radial, cutoff 10 A). The
molecules come from prepare.py (`molecules.py`) and are batched by torch_geometric's
DataLoader in ``--num-workers`` worker processes, so the input pipeline is measured too.
Loss: L1 on the normalised target, Adam. Throughput is graphs (molecules) per second.

DimeNet builds its radius graph and triplets with the plain-torch functions of
`geometry.py` (the compiled pyg-lib / torch-cluster / torch-sparse it would call have no
wheels for this torch); the model's computation is unchanged.

Runs by hand too::

    python prepare.py --num-samples 1000
    python main.py --model PNA --num-samples 1000 --batch-size 64 --hidden 16 --layers 4
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from geometry import use_plain_torch_graph_ops
from molecules import MoleculeDataset, dataset_name

from benchkit.datasets import data_dir
from benchkit.flops import count_and_declare
from benchkit.timing import TimedIterator
from benchkit.torchsetup import Setup, add_common_arguments, optimizer_step, setup

MODELS = ("PNA", "DimeNet")
# Per model: (hidden width, layers or blocks) of upstream's configuration.
DEFAULT_SHAPE = {"PNA": (64, 64), "DimeNet": (64, 6)}
# Graphs whose step is counted for the FLOPs declaration (several DimeNet batches: its
# cost grows with the cube of a molecule's atoms, one batch of 16 is a noisy sample).
COUNT_GRAPHS = 64
COUNT_BATCHES_MAX = 8


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="PNA")
    parser.add_argument(
        "--data", default=None, help="folder of prepare.py (default: $MILABENCH_DIR_DATA/geo_gnn)"
    )
    parser.add_argument("--num-samples", type=int, default=100_000, help="molecules")
    parser.add_argument("--batch-size", type=int, default=16, help="molecules per step")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument(
        "--use3d",
        action="store_true",
        help="feed 3D positions (DimeNet needs them; PNA uses the bond graph)",
    )
    parser.add_argument("--hidden", type=int, default=None, help="width (default: upstream's)")
    parser.add_argument(
        "--layers", type=int, default=None, help="PNA layers / DimeNet blocks (default: upstream's)"
    )
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--epochs", type=int, default=1000, help="upper bound; the window ends it")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.model == "DimeNet" and not args.use3d:
        parser.error("DimeNet works on 3D positions: pass --use3d")
    if args.model == "PNA" and args.use3d:
        parser.error("PNA works on the bond graph: --use3d is for DimeNet")
    hidden, layers = DEFAULT_SHAPE[args.model]
    args.hidden = args.hidden or hidden
    args.layers = args.layers or layers
    return args


def load_dataset(args: argparse.Namespace) -> MoleculeDataset:
    path = Path(args.data or data_dir("geo_gnn")) / dataset_name(args.num_samples)
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run prepare.py with the same arguments first")
    return MoleculeDataset(path)


def make_model(args: argparse.Namespace, dataset: MoleculeDataset) -> torch.nn.Module:
    if args.model == "PNA":
        from torch_geometric.nn.models import PNA

        return PNA(
            in_channels=dataset.x.size(1),
            hidden_channels=args.hidden,
            num_layers=args.layers,
            out_channels=1,
            aggregators=["mean", "min", "max", "std"],
            scalers=["identity", "amplification", "attenuation"],
            deg=dataset.in_degree_histogram(),
        )
    from torch_geometric.nn.models import DimeNet

    use_plain_torch_graph_ops()
    return DimeNet(
        hidden_channels=args.hidden,
        out_channels=1,
        num_blocks=args.layers,
        num_bilinear=8,
        num_spherical=7,
        num_radial=6,
        cutoff=10.0,
        envelope_exponent=5,
        num_before_skip=1,
        num_after_skip=2,
        num_output_layers=3,
    )


def predict(model: torch.nn.Module, batch: Any, use3d: bool) -> torch.Tensor:
    """One prediction per molecule, ``[num_graphs]``."""
    if use3d:
        return model(z=batch.z, pos=batch.pos, batch=batch.batch).view(-1)
    from torch_geometric.nn import global_mean_pool

    per_node = model(batch.x, batch.edge_index, batch=batch.batch, batch_size=batch.num_graphs)
    return global_mean_pool(per_node, batch.batch, size=batch.num_graphs).view(-1)


def count_step_flops(
    args: argparse.Namespace,
    model: torch.nn.Module,
    dataset: MoleculeDataset,
    run: Setup,
    loss_of: Callable[[Any], torch.Tensor],
) -> float:
    """Count forward + backward of a few real batches (before the timed loop).

    FlopCounterMode counts matmuls (the linear layers, DimeNet's bilinear einsum), not
    the gathers and scatter reductions of message passing: the declared figure is a
    lower bound of the work. Gradients are cleared afterwards."""
    from torch_geometric.data import Batch

    batches = min(COUNT_BATCHES_MAX, max(1, math.ceil(COUNT_GRAPHS / args.batch_size)))
    graphs = min(len(dataset), batches * args.batch_size)
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(args.seed))
    items = [dataset[int(i)] for i in order[:graphs]]
    chunks = [
        Batch.from_data_list(items[lo : lo + args.batch_size]).to(run.device)
        for lo in range(0, graphs, args.batch_size)
    ]

    def step() -> None:
        for chunk in chunks:
            loss_of(chunk).backward()

    per_item = count_and_declare(step, graphs, precision=args.precision)
    model.zero_grad(set_to_none=True)
    return per_item


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args)
    device = run.device
    from torch_geometric.loader import DataLoader

    dataset = load_dataset(args)
    if len(dataset) < args.batch_size:
        raise SystemExit(f"{len(dataset)} molecules: fewer than one batch of {args.batch_size}")
    mean, std = dataset.target_stats()
    model = make_model(args, dataset).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    scaler = run.grad_scaler()

    def loss_of(batch: Any) -> torch.Tensor:
        with run.autocast():
            pred = predict(model, batch, args.use3d)
        return F.l1_loss(pred.float(), (batch.y - mean) / std)

    per_graph = count_step_flops(args, model, dataset, run, loss_of)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"geo_gnn: {args.model} (width {args.hidden}, {args.layers} layers, "
        f"{n_params / 1e6:.2f}M parameters), {len(dataset)} molecules, batch {args.batch_size}, "
        f"{args.precision} on {device}, {torch.get_num_threads()} threads, "
        f"{args.num_workers} workers, {per_graph / 1e6:.1f} counted MFLOP per graph",
        flush=True,
    )

    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
        pin_memory=device.type == "cuda",
    )
    timed = TimedIterator(
        loader, batch_size_fn=lambda b: b.num_graphs, device=device, units="graphs/s"
    )
    for _epoch in range(args.epochs):
        for batch in timed:
            loss = loss_of(batch.to(device, non_blocking=True))
            optimizer_step(loss, opt, scaler)
            timed.record_loss(loss)
        if timed.done:
            break


if __name__ == "__main__":
    main()
