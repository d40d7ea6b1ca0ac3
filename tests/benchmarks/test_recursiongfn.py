"""recursiongfn does gflownet's SEH fragment task: the fragment environment builds real
molecules (RDKit sanitises every one, at most 9 fragments, atom counts exact), its masks
forbid illegal actions, the batch categorical is a per-graph softmax, the SEH proxy loads
the real weights-file format, and main.py trains on the CPU with the sampling in this
process and in a worker process (which logs its molecules to SQLite, as gflownet's do),
announcing the stand-in proxy when the input is missing.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import json
import math
import pickle
import random
import sqlite3
import sys
from pathlib import Path

import pytest
from needs import needs

from .conftest import BENCHMARKS, bench_env, run_with_pipe

torch = pytest.importorskip("torch")
needs("torch_geometric")
Chem = pytest.importorskip("rdkit.Chem")
np = pytest.importorskip("numpy")

GFN = BENCHMARKS / "recursiongfn"
STOP = 3
SMALL = ["--batch-size", "8", "--layer-width", "16", "--num-layers", "1"]


@pytest.fixture(scope="module")
def gfn():
    """The benchmark's modules (its folder on sys.path, as main.py runs)."""
    sys.path.insert(0, str(GFN))
    try:
        names = ("fragments", "env", "batching", "model", "proxy", "sampling")
        yield {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(GFN))


def legal_actions(arrays: dict) -> list[tuple[int, int, int]]:
    acts = [(0, 0, 0)] if arrays["stop_mask"][0, 0] else []
    acts += [(1, int(r), int(c)) for r, c in zip(*np.nonzero(arrays["add_node_mask"]), strict=True)]
    acts += [
        (2, int(r), int(c)) for r, c in zip(*np.nonzero(arrays["set_edge_attr_mask"]), strict=True)
    ]
    return acts


def test_random_rollouts_build_sane_molecules(gfn):
    env = gfn["env"].FragEnv(max_frags=9)
    assert env.num_types == 72 and env.num_stems == 6
    rng = random.Random(0)
    for _ in range(150):
        g = gfn["env"].FragGraph()
        while True:
            acts = legal_actions(env.featurise(g))
            assert acts, g
            stop = (0, 0, 0) in acts and rng.random() < 0.25
            act = (0, 0, 0) if stop else rng.choice([a for a in acts if a[0]] or acts)
            if act[0] == 0:
                break
            g = env.step(g, act)
            assert len(g) <= 9 and len(g.edges) == len(g) - 1
        mol = env.to_mol(g)
        assert env.is_sane(g)
        assert Chem.MolFromSmiles(Chem.MolToSmiles(mol)) is not None
        assert mol.GetNumAtoms() == sum(env.num_atoms[t] for t in g.types)
        assert mol.GetNumBonds() == sum(env.mols[t].GetNumBonds() for t in g.types) + len(g.edges)
        assert len(Chem.GetMolFrags(mol)) == 1


def test_masks_forbid_illegal_actions(gfn):
    env_mod = gfn["env"]
    env = env_mod.FragEnv(max_frags=3)
    br = [smi for smi, _ in gfn["fragments"].FRAGMENTS].index("Br")  # one attachment atom
    benzene = [smi for smi, _ in gfn["fragments"].FRAGMENTS].index("c1ccccc1")
    empty = env.featurise(env_mod.FragGraph())
    assert empty["x"].shape == (1, 73) and empty["x"][0, -1] == 1
    assert empty["stop_mask"][0, 0] == 0 and empty["add_node_mask"].all()
    g = env.step(env_mod.FragGraph(), (1, 0, br))
    a = env.featurise(g)
    assert a["stop_mask"][0, 0] == 1 and a["add_node_mask"].all()
    assert env.count_backward(g) == 1
    g = env.step(g, (1, 0, benzene))  # Br - benzene, attachments unset
    a = env.featurise(g)
    assert a["stop_mask"][0, 0] == 0  # an edge without its attachments: no stop
    assert not a["add_node_mask"][0].any() and a["add_node_mask"][1].all()  # Br is full
    assert a["set_edge_attr_mask"].tolist() == [[1, 0, 0, 0, 0, 0] + [1] * 6]
    assert env.count_backward(g) == 2  # either leaf
    g = env.step(g, (2, 0, 6 + 2))  # benzene's atom 2
    g = env.step(g, (2, 0, 0))
    a = env.featurise(g)
    assert a["stop_mask"][0, 0] == 1 and not a["set_edge_attr_mask"].any()
    assert env.count_backward(g) == 2  # one per set attachment
    with pytest.raises(ValueError):
        env.step(g, (2, 0, 0))
    g = env.step(g, (1, 1, benzene))
    a = env.featurise(g)
    assert a["set_edge_attr_mask"][1, 2] == 0 and a["set_edge_attr_mask"][1, :6].sum() == 5
    assert not a["add_node_mask"].any()  # max_frags reached
    assert Chem.MolToSmiles(env.to_mol(env.step(env.step(g, (2, 1, 0)), (2, 1, 6)))) == (
        Chem.MolToSmiles(Chem.MolFromSmiles("Brc1cc(-c2ccccc2)ccc1"))
    )


def test_the_categorical_is_a_softmax_per_graph(gfn):
    b = gfn["batching"]
    env = gfn["env"].FragEnv()
    graphs = [gfn["env"].FragGraph()]
    g = env.step(graphs[0], (1, 0, 3))
    graphs += [g, env.step(g, (1, 0, 10))]
    arrays = b.collate([env.featurise(x) for x in graphs])
    batch = b.GraphBatch.of(arrays, "cpu")
    owner = batch.owners()
    gen = torch.Generator().manual_seed(0)
    mask = b.flat(batch.masks())
    logits = torch.randn(owner.shape, generator=gen) * mask - 1000 * (1 - mask)
    lp = b.log_softmax(logits, owner, 3)
    for i in range(3):
        assert torch.allclose(lp[owner == i], torch.log_softmax(logits[owner == i], 0), atol=1e-5)
    draws = torch.stack([b.sample(logits, mask, owner, 3) for _ in range(400)])
    assert bool((mask[draws] == 1).all()) and bool((owner[draws] == torch.arange(3)).all())
    actions = b.decode(draws[0].numpy(), arrays)
    assert (b.encode(np.array(actions), arrays) == draws[0].numpy()).all()
    top = int(logits[owner == 1].argmax())  # graph 1: its likeliest action is drawn most
    index = torch.nonzero(owner == 1)[top]
    share = (draws[:, 1] == index).float().mean().item()
    assert abs(share - lp[index].exp().item()) < 0.1


def write_params(path: Path, model, proxy_mod) -> None:
    """A weights file in load_original_model's format, from ``model``'s parameters."""
    params = [np.zeros((2, 2), np.float32) for _ in range(22)]
    for name, index in proxy_mod.PARAM_MAP.items():
        params[index] = model.get_parameter(name).detach().numpy().copy()
    with gzip.open(path, "wb") as handle:
        pickle.dump(params, handle)


def mol_batch(proxy_mod, smiles: list[str]) -> dict:
    arrays = proxy_mod.collate_mols([proxy_mod.mol_arrays(Chem.MolFromSmiles(s)) for s in smiles])
    return {k: torch.as_tensor(v) for k, v in arrays.items()}


def test_the_proxy_loads_the_real_file_format(gfn, tmp_path):
    proxy_mod = gfn["proxy"]
    torch.manual_seed(3)
    direct = proxy_mod.MPNNet().eval()
    path = tmp_path / "bengio2021flow_proxy.pkl.gz"
    write_params(path, direct, proxy_mod)
    loaded = proxy_mod.load_proxy(path)
    stand_in = proxy_mod.load_proxy(None)
    b = mol_batch(proxy_mod, ["c1ccccc1CC(=O)N", "C", "Brc1ccncc1"])
    args = (b["x"], b["edge_index"], b["edge_attr"], b["batch"], 3)
    with torch.no_grad():
        assert torch.equal(loaded(*args), direct(*args))
        assert not torch.equal(stand_in(*args), direct(*args))
    assert b["x"].shape[1] == 71 and b["edge_attr"].shape[1] == 4
    lone = int(torch.nonzero(b["batch"] == 1)[0])  # methane: one atom, one zero self-loop
    assert b["edge_index"][:, b["batch"][b["edge_index"][0]] == 1].tolist() == [[lone], [lone]]
    evil = tmp_path / "evil.pkl.gz"
    with gzip.open(evil, "wb") as handle:
        pickle.dump([print], handle)
    with pytest.raises(pickle.UnpicklingError):
        proxy_mod.load_params(evil)
    reward = proxy_mod.log_reward(torch.tensor([8.0, -1.0, float("nan")]), torch.tensor(64.0))
    assert reward.tolist() == pytest.approx([0.0, 64 * math.log(1e-4), 64 * math.log(1e-4)])


def test_a_sampled_batch_is_what_the_loss_needs(gfn):
    env_mod, b, sampling = gfn["env"], gfn["batching"], gfn["sampling"]
    env = env_mod.FragEnv()
    torch.manual_seed(0)
    model = gfn["model"].GraphTransformerGFN(73, 14, 32, 72, 12, num_emb=16, num_layers=1)
    proxy = gfn["proxy"].load_proxy(None)

    def call(name, arrays):
        t = {k: torch.as_tensor(v) for k, v in arrays.items()}
        with torch.no_grad():
            if name == "policy":
                logits, _ = model(b.GraphBatch.of(arrays, "cpu"), t["cond"])
                return [x.numpy() for x in logits]
            graphs = int(t["batch"][-1]) + 1
            return proxy(t["x"], t["edge_index"], t["edge_attr"], t["batch"], graphs).numpy()

    arrays = sampling.BatchSampler(env, 12, np.zeros(32), 64.0).sample(call)
    lens = arrays["traj_lens"]
    states = arrays["node_start"].shape[0]
    assert lens.sum() == states == arrays["actions"].shape[0] == arrays["log_pb"].shape[0]
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    first_nodes = arrays["node_start"][starts]
    assert (arrays["x"][first_nodes, -1] == 1).all()  # every trajectory starts empty
    mask = b.flat([torch.as_tensor(arrays[k]) for k in b.MASKS])
    assert (mask[torch.as_tensor(arrays["actions"])] == 1).all()  # every action was legal
    ends = starts + lens - 1
    assert (arrays["actions"][ends] == ends).all()  # ... the last one is Stop
    assert (arrays["log_pb"] <= 0).all() and (arrays["log_pb"][ends] == 0).all()
    floor = 64 * math.log(1e-4) - 1e-3  # proxy / 8 clipped at 1e-4 (the loss clips at -75)
    assert arrays["is_valid"].all() and (arrays["log_rewards"] >= floor).all()
    assert arrays["x"].shape[0] == sum(max(1, int(x)) for x in np.bincount(arrays["batch"]))


def run_main(tmp_path: Path, *extra: str, data: Path | None = None):
    argv = [sys.executable, "main.py", *SMALL, "--device", "cpu", "--threads", "1", *extra]
    env = bench_env(stop=STOP, skip=1, MILABENCH_DIR_DATA=str(data or tmp_path / "data"))
    return run_with_pipe(argv, env, GFN, timeout=300)


def check_trained(run) -> None:
    assert run.returncode == 0, run.stderr[-3000:]
    rates = run.rates()
    assert len(rates) == STOP and all(r["units"] == "nodes/s" and r["rate"] > 0 for r in rates)
    assert run.losses() and all(math.isfinite(x) and x >= 0 for x in run.losses())
    [flops] = [r for r in run.records if "flops_per_item" in r]
    assert flops["flops_source"] == "counted" and flops["flops_per_item"] > 1e4
    assert len(run.events("stop")) == 1


def test_main_trains_with_the_stand_in_announced(tmp_path):
    run = run_main(tmp_path, "--num-workers", "0")
    check_trained(run)
    lines = [x for x in run.stdout.splitlines() if "upstream's inputs missing" in x]
    assert len(lines) == 1 and "bengio2021flow-proxy" in lines[0] and "random weights" in lines[0]
    [record] = [r for r in run.records if r.get("task") == "inputs"]
    assert record["inputs"]["comparable"] is False
    assert "sampling tau 0.9" in run.stdout and "proxy STAND-IN" in run.stdout


def prepared_input(gfn, tmp_path: Path) -> Path:
    """A prepared ``bengio2021flow-proxy`` under ``tmp_path/data`` (random weights in the
    real format, with its manifest); returns the weights file."""
    folder = tmp_path / "data" / "inputs" / "bengio2021flow-proxy"
    folder.mkdir(parents=True)
    weights = folder / "bengio2021flow_proxy.pkl.gz"
    torch.manual_seed(5)
    write_params(weights, gfn["proxy"].MPNNet(), gfn["proxy"])
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    manifest = {
        "name": "bengio2021flow-proxy",
        "source": "test",
        "revision": "test-revision",
        "files": {weights.name: {"sha256": digest, "size": weights.stat().st_size}},
    }
    (folder / "milabench-input.json").write_text(json.dumps(manifest))
    return weights


def test_prepare_keeps_a_prepared_input(gfn, tmp_path):
    """prepare.py finds the input in place (no network) and says so."""
    weights = prepared_input(gfn, tmp_path)
    env = bench_env(MILABENCH_DIR_DATA=str(tmp_path / "data"))
    run = run_with_pipe([sys.executable, "prepare.py"], env, GFN, timeout=60)
    assert run.returncode == 0, run.stderr
    assert f"input bengio2021flow-proxy ready in {weights.parent}" in run.stdout


def test_main_samples_in_a_worker_with_the_prepared_proxy(gfn, tmp_path):
    weights = prepared_input(gfn, tmp_path)
    logs = tmp_path / "logs"
    run = run_main(
        tmp_path, "--num-workers", "1", "--log-dir", str(logs), "--checkpoint-every", "2"
    )
    check_trained(run)
    with sqlite3.connect(logs / "train" / "generated_mols_0.db") as db:
        rows = db.execute("select smi, r, fr_0, ci_beta from results").fetchall()
    assert len(rows) >= 8 * STOP and all(Chem.MolFromSmiles(smi) for smi, *_ in rows)
    assert all(0 < r and 0.999e-4 <= fr <= 100 and beta == 64 for _, r, fr, beta in rows)
    state = torch.load(logs / "model_state.pt", weights_only=True)
    assert state["step"] >= 2 and "sampling_model_state_dict" in state
    assert "upstream's inputs missing" not in run.stdout
    assert f"proxy from {weights}" in run.stdout and "1 sampling workers" in run.stdout
    [record] = [r for r in run.records if r.get("task") == "inputs"]
    assert record["inputs"]["comparable"] is True
    assert record["inputs"]["real"] == {"bengio2021flow-proxy": "test-revision"}
