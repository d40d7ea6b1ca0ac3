"""The graph benchmarks (geo_gnn: pna and dimenet; recursiongfn) at tiny sizes report
through the data channel; their plain-torch graph code agrees with brute force.

The training runs are the session's smoke run's (its `pna`, `dimenet` and `recursiongfn`
entries, loading in the training process); PNA with a loader worker, which the smoke does
not run, is run here (exact step counts, see conftest.bench_env). Each run checks: rate
records in the benchmark's unit, finite losses, the counted FLOPs declaration, and the
``stop`` event."""

from __future__ import annotations

import importlib.util
import math
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
from needs import needs

from .conftest import BENCHMARKS, bench_env, run_with_pipe
from .smokerun import SmokeRun

torch = pytest.importorskip("torch")
needs("torch_geometric")

GEO = BENCHMARKS / "geo_gnn"
STOP = 3


def load(path: Path, name: str) -> ModuleType:
    """Import one benchmark module by path, under a name that cannot collide."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def check_losses_and_flops(losses: list[float], flops: list[dict], min_flops: float) -> None:
    assert losses and all(math.isfinite(x) and x >= 0 for x in losses)
    assert len(flops) == 1, flops
    assert flops[0]["flops_source"] == "counted" and flops[0]["precision"] == "fp32"
    assert flops[0]["flops_per_item"] > min_flops


def check_run(run, units: str, min_flops: float = 1e4) -> None:
    assert run.returncode == 0, run.stderr[-3000:]
    rates = run.rates()
    assert len(rates) == STOP, (rates, run.stderr[-2000:])
    assert all(r["units"] == units and r["rate"] > 0 for r in rates)
    stops = run.events("stop")
    assert len(stops) == 1 and stops[0]["$data"]["observations"] == STOP
    flops = [r for r in run.records if "flops_per_item" in r]
    check_losses_and_flops(run.losses(), flops, min_flops)


def check_smoke(smoke: SmokeRun, entry: str, units: str, min_flops: float = 1e4) -> None:
    """`check_run` on the smoke run's records of ``entry`` (a time window: the stop
    event's observations are the window's and the rate records', `SmokeRun.check_measured`)."""
    smoke.check_measured(entry, units, loss=False)
    check_losses_and_flops(smoke.losses(entry), smoke.declared_flops(entry), min_flops)


@pytest.fixture(scope="module")
def molecules(tmp_path_factory) -> Path:
    """300 molecules written by prepare.py (once for the module)."""
    data = tmp_path_factory.mktemp("geo")
    argv = [sys.executable, "prepare.py", "--data", str(data), "--num-samples", "300"]
    first = run_with_pipe(argv + ["--model", "PNA"], bench_env(), GEO, timeout=120)
    assert first.returncode == 0, first.stderr
    folder = data / "molecules-300"
    assert (folder / "processed" / "sqlite.db").is_file() and (folder / "stats.json").is_file()
    assert (data / "molecules-300.done").is_file()
    again = run_with_pipe(argv, bench_env(), GEO, timeout=120)
    assert "already prepared" in again.stdout
    return data


@pytest.fixture(scope="module")
def mols():
    """geo_gnn's molecules.py, importable by its name (main.py and prepare.py import it
    so) while this module's tests run."""
    sys.path.insert(0, str(GEO))
    yield load(GEO / "molecules.py", "molecules")
    sys.path.remove(str(GEO))
    for name in ("molecules", "prepare", "geo_main"):
        sys.modules.pop(name, None)


def test_molecules_have_pcqm4mv2_sizes(mols):
    """PCQM4Mv2's heavy-atom molecules: 14.1 atoms and 14.6 bonds on average (OGB-LSC),
    so about 1.5 rings each; bonds of 1.2-1.6 A (rings 1.40 A), no two atoms closer."""
    data = mols.generate(8000, seed=1)
    ptr = data["node_ptr"]
    sizes = (ptr[1:] - ptr[:-1]).float()
    bonds = (data["edge_ptr"][1:] - data["edge_ptr"][:-1]).float() / 2
    assert sizes.mean().item() == pytest.approx(mols.PCQM4MV2_ATOMS, abs=0.15)
    assert bonds.mean().item() == pytest.approx(mols.PCQM4MV2_BONDS, abs=0.15)
    assert int(sizes.min()) >= mols.MIN_ATOMS and int(sizes.max()) <= mols.MAX_ATOMS
    assert 2.5 < sizes.std().item() < 4.0
    rings = bonds - (sizes - 1)
    assert (rings == 0).any() and (rings >= 2).any()
    # the table's own mean is the published one
    table = torch.tensor(mols.HEAVY_ATOMS_PER_10K, dtype=torch.float)
    atoms = torch.arange(mols.MIN_ATOMS, mols.MAX_ATOMS + 1, dtype=torch.float)
    assert (table * atoms).sum().item() / table.sum().item() == pytest.approx(14.12, abs=0.01)
    carbon = (data["z"] == 6).float().mean().item()
    assert 0.70 < carbon < 0.82  # PCQM4Mv2: 74.5% of heavy atoms are carbon
    assert mols.check_distances(data, samples=500) > 1.0
    offset = ptr[:-1].repeat_interleave(data["edge_ptr"][1:] - data["edge_ptr"][:-1])
    a, b = data["edge_index"] + offset
    lengths = (data["pos"][a] - data["pos"][b]).norm(dim=1)
    assert bool(((lengths > 1.19) & (lengths < 1.61)).all())


def test_prepared_molecules_have_upstreams_schema(molecules, mols):
    """The database holds upstream's PCQM4Mv2Subset rows: int64 atom and bond features,
    a SMILES string, a float target, 3D positions and atomic numbers."""
    import json

    dataset = mols.MoleculeDB(molecules / "molecules-300")
    assert len(dataset) == 300
    item = dataset[7]
    assert item.x.dtype == torch.int64 and item.x.shape == (item.num_nodes, mols.NUM_FEATURES)
    assert item.edge_attr.shape == (item.edge_index.shape[1], 3)
    assert isinstance(item.smiles, str) and isinstance(item.y, float)
    assert item.pos.shape == (item.num_nodes, 3) and item.z.shape == (item.num_nodes,)
    assert int(item.edge_index.max()) < item.num_nodes
    batch = dataset.__getitems__([3, 1, 4])  # what the loader asks for: one query
    assert [b.num_nodes for b in batch] == [dataset[i].num_nodes for i in (3, 1, 4)]
    stats = json.loads((molecules / "molecules-300" / "stats.json").read_text())
    hist = torch.tensor(stats["in_degree_histogram"])
    assert int(hist.sum()) == stats["atoms"] and stats["molecules"] == 300


def test_upstream_loss_broadcasts_like_upstream(mols):
    """Upstream's nn.L1Loss compares a [B] prediction with [B, 1] targets: B x B pairs."""
    main = load(GEO / "main.py", "geo_main")
    pred = torch.tensor([0.0, 1.0, 3.0])
    y = torch.tensor([1.0, 2.0, 0.0])
    pairs = (pred.view(1, -1) - y.view(-1, 1)).abs().mean()
    assert main.upstream_l1(pred, y).item() == pytest.approx(pairs.item())


def test_a_warning_inside_the_step_is_shown_once_not_at_every_step(mols):
    """torch_geometric warns at each scatter min/max without torch-scatter: shown once
    per process, as Python does, and not again at each step (the loss used to reset the
    warnings already shown, so the H200's pna printed it 25 times in 13 s)."""
    main = load(GEO / "main.py", "geo_main")
    pred, y = torch.tensor([0.0, 1.0, 3.0]), torch.tensor([1.0, 2.0, 0.0])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # once per place that warns
        main.quiet_broadcast()
        for _ in range(3):  # three steps: the loss, then a warning of the step
            main.upstream_l1(pred, y)
            warnings.warn("scatter could be faster", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["scatter could be faster"]


def test_pna_trains_on_prepared_molecules(smoke: SmokeRun):
    """Reads the session's smoke run (entry ``pna``: molecules prepared by milabench
    prepare, loaded in the training process)."""
    assert smoke.command("pna")[1].endswith("benchmarks/geo_gnn/main.py")
    assert smoke.option("pna", "--model") == "PNA"
    check_smoke(smoke, "pna", "graphs/s")
    stdout = smoke.stdout_of("pna")
    assert "PNA" in stdout and "0 workers" in stdout


def test_pna_loads_in_worker_processes(molecules, python):
    """With loader workers, each forked worker opens its own SQLite connection."""
    argv = [python, "main.py", "--model", "PNA", "--data", str(molecules)]
    argv += ["--num-samples", "300", "--batch-size", "32", "--hidden", "8", "--layers", "2"]
    argv += ["--num-workers", "1", "--device", "cpu", "--threads", "1"]
    run = run_with_pipe(argv, bench_env(stop=STOP, skip=1), GEO)
    check_run(run, "graphs/s")


def test_dimenet_trains_on_3d_molecules(smoke: SmokeRun):
    """Reads the session's smoke run (entry ``dimenet``: ``--model DimeNet --use3d``)."""
    command = smoke.command("dimenet")
    assert command[1].endswith("benchmarks/geo_gnn/main.py") and "--use3d" in command
    assert smoke.option("dimenet", "--model") == "DimeNet"
    check_smoke(smoke, "dimenet", "graphs/s")


def test_dimenet_needs_3d_and_data(tmp_path, python):
    run = run_with_pipe([python, "main.py", "--model", "DimeNet"], bench_env(), GEO, timeout=60)
    assert run.returncode == 2 and "--use3d" in run.stderr
    argv = [python, "main.py", "--data", str(tmp_path), "--num-samples", "5", "--device", "cpu"]
    run = run_with_pipe(argv, bench_env(), GEO, timeout=60)
    assert run.returncode != 0 and "prepare.py" in run.stderr


def test_recursiongfn_trains_with_trajectory_balance(smoke: SmokeRun):
    """gflownet's SEH fragment task: the rate counts the nodes of every state graph of a
    step (upstream's item); the trajectories are sampled by an EMA copy of the policy in
    worker processes (the environment and the proxy: test_recursiongfn.py).
    Reads the session's smoke run (entry ``recursiongfn``)."""
    assert smoke.command("recursiongfn")[1].endswith("benchmarks/recursiongfn/main.py")
    check_smoke(smoke, "recursiongfn", "nodes/s", min_flops=100)
    assert all(r["rate"] < 1e7 for r in smoke.rates("recursiongfn"))
    out = smoke.stdout_of("recursiongfn")
    assert "sampling tau 0.9" in out and "SEH fragments (72, at most 9)" in out


# -- plain-torch graph operations --------------------------------------------------------


def brute_radius(pos, batch, r, cap):
    """(neighbour, centre) pairs: same graph, not itself, within r, lowest-numbered first."""
    edges = []
    for i in range(len(pos)):
        near = [
            j
            for j in range(len(pos))
            if j != i and batch[j] == batch[i] and float((pos[i] - pos[j]).pow(2).sum()) <= r * r
        ]
        edges += [(j, i) for j in (near if cap is None else near[:cap])]
    return edges


@pytest.mark.parametrize("cap", [None, 2])
def test_radius_graph_matches_brute_force(cap):
    geometry = load(GEO / "geometry.py", "geo_geometry")
    gen = torch.Generator().manual_seed(3)
    sizes = [5, 1, 7, 4]
    pos = torch.rand(sum(sizes), 3, generator=gen) * 3.0
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    got = geometry.radius_graph(pos, r=1.6, batch=batch, max_num_neighbors=cap)
    want = brute_radius(pos, batch, 1.6, cap)
    assert want and [tuple(e) for e in got.t().tolist()] == want
    flipped = geometry.radius_graph(pos, 1.6, batch, max_num_neighbors=cap, flow="target_to_source")
    assert torch.equal(flipped, got.flip(0))
    # one graph without a batch vector; loops on request
    single = geometry.radius_graph(pos[:5], r=1.6, loop=True, max_num_neighbors=None)
    assert {(i, i) for i in range(5)} <= {tuple(e) for e in single.t().tolist()}


def test_triplets_match_brute_force():
    geometry = load(GEO / "geometry.py", "geo_geometry")
    gen = torch.Generator().manual_seed(5)
    sizes = [6, 3, 5]
    pos = torch.rand(sum(sizes), 3, generator=gen) * 2.5
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    edge_index = geometry.radius_graph(pos, r=1.5, batch=batch)
    i, j, idx_i, idx_j, idx_k, idx_kj, idx_ji = geometry.triplets(edge_index, pos.size(0))
    assert torch.equal(i, edge_index[1]) and torch.equal(j, edge_index[0])

    edges = [tuple(e) for e in edge_index.t().tolist()]  # (source, target)
    want = sorted(
        (ti, tj, sk, f, e)
        for e, (tj, ti) in enumerate(edges)
        for f, (sk, target) in enumerate(edges)
        if target == tj and sk != ti
    )
    got = sorted(
        zip(
            idx_i.tolist(),
            idx_j.tolist(),
            idx_k.tolist(),
            idx_kj.tolist(),
            idx_ji.tolist(),
            strict=True,
        )
    )
    assert want and got == want


def test_dimenet_uses_the_plain_torch_ops():
    pytest.importorskip("scipy")
    geometry = load(GEO / "geometry.py", "geo_geometry")
    from torch_geometric.nn.models import DimeNet, dimenet

    geometry.use_plain_torch_graph_ops()
    assert dimenet.radius_graph is geometry.radius_graph
    assert dimenet.triplets is geometry.triplets
    model = DimeNet(8, 1, 1, 2, 3, 3, cutoff=5.0, output_initializer="glorot_orthogonal")
    gen = torch.Generator().manual_seed(7)
    z = torch.randint(1, 10, (9,), generator=gen)
    pos = torch.rand(9, 3, generator=gen) * 3
    batch = torch.tensor([0] * 4 + [1] * 5)
    out = model(z, pos, batch)
    assert out.shape == (2, 1) and bool(torch.isfinite(out).all()) and bool(out.abs().sum() > 0)
    # Rotation invariance: a property of DimeNet that wrong edges or triplets would break.
    rotation, _ = torch.linalg.qr(torch.randn(3, 3, generator=gen))
    assert torch.allclose(model(z, pos @ rotation.T, batch), out, atol=1e-4)
