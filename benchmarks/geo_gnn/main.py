"""Train a torch_geometric GNN (PNA or DimeNet) to regress a property of molecules.

The models are torch_geometric's own, with random weights: ``PNA`` (principal
neighbourhood aggregation over the bond graph: mean/min/max/std aggregators, identity/
amplification/attenuation degree scalers; upstream's shape is 64 layers of width 64; the
per-atom outputs max-pooled per molecule) and ``DimeNet`` (directional message passing
over a radius graph of the 3D positions, with angle triplets; hidden 64, 6 blocks, 8
bilinear, 7 spherical, 6 radial, cutoff 10 A). The molecules come from prepare.py, in an
SQLite ``OnDiskDataset`` with upstream's schema: for ``dimenet``, upstream's (the first
molecules of PCQM4Mv2 with their DFT conformers, `pcqm4mv2.py`) when its input was
prepared, else the stand-in (`molecules.py`: generated, PCQM4Mv2-shaped), announced as
not comparable (``benchshared.inputs.announce``, rank 0, before the measurement); for
``pna``, the stand-in (docs/parity.md). They are batched by torch_geometric's DataLoader (``--num-workers``; upstream's default and
the suites': 0, loading in the training process), so the input pipeline is measured too.
Loss: L1 on the normalised target, computed as upstream computes it (a ``[B]`` prediction
against ``[B, 1]`` targets: broadcast to ``B x B`` pairs), Adam. Throughput is graphs
(molecules) per second.

DimeNet builds its radius graph and triplets with the plain-torch functions of
`geometry.py` (the compiled pyg-lib / torch-cluster / torch-sparse it would call have no
wheels for this torch); the model's computation is unchanged. Its sympy bases are
computed once per machine (`basis_cache.py`: 25 s of a core, before the measurement).

Runs by hand too::

    python prepare.py --num-samples 1000
    python main.py --model PNA --num-samples 1000 --batch-size 64 --hidden 16 --layers 4
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from geometry import use_plain_torch_graph_ops
from molecules import MoleculeDB, dataset_name
from pcqm4mv2 import INPUT
from prepare import STATS, entry_name, real_subset, wants_real_molecules

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare
from benchkit.memory import check_memory
from benchkit.shm import loader_prefetch, sampled_batch_bytes
from benchkit.timing import TimedIterator
from benchkit.torchsetup import Setup, add_common_arguments, optimizer_step, setup
from benchshared.datasets import data_dir
from benchshared.inputs import announce, locate

MODELS = ("PNA", "DimeNet")
STAND_IN = "generated PCQM4Mv2-shaped molecules (benchmarks/geo_gnn/molecules.py)"
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


def load_dataset(
    args: argparse.Namespace, entry: str
) -> tuple[MoleculeDB, dict[str, Any], Path | None]:
    """The prepared database, its statistics (``stats.json``) and, when they are
    upstream's molecules, the input folder they were built from (None: the stand-in)."""
    root = Path(args.data or data_dir("geo_gnn"))
    if wants_real_molecules(entry):
        source = locate(INPUT)
        folder = real_subset(root, args.num_samples, source)
        if folder is not None:
            return MoleculeDB(folder), json.loads((folder / STATS).read_text()), source
    folder = root / dataset_name(args.num_samples)
    if not (folder / STATS).is_file():
        raise SystemExit(f"{folder} is not prepared: run prepare.py with the same arguments first")
    return MoleculeDB(folder), json.loads((folder / STATS).read_text()), None


def make_model(args: argparse.Namespace, stats: dict[str, Any]) -> torch.nn.Module:
    if args.model == "PNA":
        from torch_geometric.nn.models import PNA

        return PNA(
            in_channels=9,  # from_smiles's atom features
            hidden_channels=args.hidden,
            num_layers=args.layers,
            out_channels=1,
            aggregators=["mean", "min", "max", "std"],
            scalers=["identity", "amplification", "attenuation"],
            deg=torch.tensor(stats["in_degree_histogram"]),
        )
    from basis_cache import cache_bases
    from torch_geometric.nn.models import DimeNet

    use_plain_torch_graph_ops()
    cache_bases()
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
    """One prediction per molecule, ``[num_graphs]`` (upstream squeezes ``[B, 1]``)."""
    if use3d:
        return model(z=batch.z, pos=batch.pos, batch=batch.batch).view(-1)
    from torch_geometric.nn import global_max_pool

    x = batch.x.float()  # upstream: batch.x.type(torch.float), the int64 features
    per_node = model(x, batch.edge_index, batch=batch.batch, batch_size=batch.num_graphs)
    return global_max_pool(per_node, batch.batch, size=batch.num_graphs).view(-1)


def upstream_l1(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Upstream's loss as it runs: ``nn.L1Loss()(pred, y.view(B, -1))`` with ``pred`` of
    shape ``[B]`` and ``y`` of ``[B, 1]`` broadcasts to ``[B, B]``: the mean of
    ``|pred_i - y_j|`` over every pair (for pna's 4096 molecules, 16.8M terms forward and
    backward; a small share of the step). Reproduced as is, so that the step's work is
    upstream's. torch's warning about the broadcast is silenced once (`quiet_broadcast`),
    not here: a ``catch_warnings`` block per step resets the warnings already shown, so
    torch_geometric's own warning was printed again at every step (25 times in a 13-s
    window of pna on an H200)."""
    return F.l1_loss(pred, target.view(target.size(0), -1))


def quiet_broadcast() -> None:
    """Silence, for the whole process, torch's warning that `upstream_l1` broadcasts
    (intended: it is upstream's loss)."""
    warnings.filterwarnings("ignore", message="Using a target size", category=UserWarning)


def count_step_flops(
    args: argparse.Namespace,
    model: torch.nn.Module,
    dataset: MoleculeDB,
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
    quiet_broadcast()
    run = setup(args)
    device = run.device
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    from torch_geometric.loader import DataLoader

    entry = entry_name(args.model)
    real_wanted = wants_real_molecules(entry)
    dataset, stats, source = load_dataset(args, entry)
    if source is not None:
        kind = "PCQM4Mv2's molecules"
    else:
        kind = "STAND-IN molecules" if real_wanted else "generated PCQM4Mv2-shaped molecules"
    if len(dataset) < args.batch_size:
        raise SystemExit(f"{len(dataset)} molecules: fewer than one batch of {args.batch_size}")
    mean, std = stats["y_mean"], stats["y_std"]
    model = make_model(args, stats).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=0)
    scaler = run.grad_scaler()

    def loss_of(batch: Any) -> torch.Tensor:
        with run.autocast():
            pred = predict(model, batch, args.use3d)
        return upstream_l1(pred.float(), (batch.y - mean) / std)

    per_graph = count_step_flops(args, model, dataset, run, loss_of)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"geo_gnn: {args.model} (width {args.hidden}, {args.layers} layers, "
        f"{n_params / 1e6:.2f}M parameters), {len(dataset)} molecules, batch {args.batch_size}, "
        f"{args.precision} on {device}, {torch.get_num_threads()} threads, "
        f"{args.num_workers} workers, {stats['atoms'] / stats['molecules']:.2f} atoms and "
        f"{stats['bonds'] / stats['molecules']:.2f} bonds per molecule, "
        f"{per_graph / 1e6:.1f} counted MFLOP per graph, " + kind,
        flush=True,
    )
    if real_wanted:
        announce(entry, {INPUT: source}, stand_in=STAND_IN)

    batch_bytes = sampled_batch_bytes(dataset, args.batch_size)  # before the forget below
    if args.num_workers > 0:
        dataset.forget_connection()  # each forked worker opens its own
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
        prefetch_factor=loader_prefetch(batch_bytes, args.num_workers, label="geo_gnn"),
    )  # upstream's: no pinned memory, a blocking copy to the device
    timed = TimedIterator(
        loader, batch_size_fn=lambda b: b.num_graphs, device=device, units="graphs/s"
    )
    for _epoch in range(args.epochs):
        for batch in timed:
            loss = loss_of(batch.to(device))
            optimizer_step(loss, opt, scaler)
            timed.record_loss(loss)
        if timed.done:
            break


if __name__ == "__main__":
    run_and_exit(main)
