"""The SEH reward proxy of gflownet's fragment task (``gflownet.models.bengio2021flow``).

`MPNNet`: Bengio et al.'s message-passing network as ``load_original_model`` builds it
(71 atom features, width 64, 12 steps of an edge-conditioned `NNConv` (mean) and a GRU,
`Set2Set` readout of 3 steps, one output per molecule). `mol_arrays` is gflownet's
``mol2graph`` featurisation (atom type, aromaticity, hybridisation, hydrogens, one-hot
atomic number; bond type one-hot; bonds both ways, sorted as ``coalesce`` sorts them; a
lone atom gets one zero self-loop). `load_params` reads the weights file as
``load_original_model`` does: a gzip pickle of 22 parameter arrays, mapped onto the
modules by position (unpickled with only numpy's array classes allowed). `reward` is
``SEHTask``'s: ``pred / 8`` clipped to ``[1e-4, 100]`` (NaN: 0), ``log R = beta * log``.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

INPUT = "bengio2021flow-proxy"
FILE = "bengio2021flow_proxy.pkl.gz"  # the file's name in the input folder
NUM_ATOMIC_NUMBERS = 56
NUM_FEAT = 14 + 1 + NUM_ATOMIC_NUMBERS
ATOM_TYPES = {"H": 0, "C": 1, "N": 2, "O": 3, "F": 4}
# load_original_model's map: module parameter -> position in the pickled list.
PARAM_MAP = {
    "lin0.weight": 0,
    "lin0.bias": 1,
    "conv.lin.weight": 2,
    "conv.bias": 3,
    "conv.nn.0.weight": 4,
    "conv.nn.0.bias": 5,
    "conv.nn.2.weight": 6,
    "conv.nn.2.bias": 7,
    "gru.weight_ih_l0": 8,
    "gru.weight_hh_l0": 9,
    "gru.bias_ih_l0": 10,
    "gru.bias_hh_l0": 11,
    "set2set.lstm.weight_ih_l0": 16,
    "set2set.lstm.weight_hh_l0": 17,
    "set2set.lstm.bias_ih_l0": 18,
    "set2set.lstm.bias_hh_l0": 19,
    "lin3.weight": 20,
    "lin3.bias": 21,
}


class MPNNet(nn.Module):
    """The proxy network (``bengio2021flow.MPNNet`` with ``load_original_model``'s sizes;
    its unused per-bond head is left out)."""

    def __init__(self, num_feat: int = NUM_FEAT, dim: int = 64, num_conv_steps: int = 12) -> None:
        super().__init__()
        from torch_geometric.nn import NNConv, Set2Set

        self.lin0 = nn.Linear(num_feat, dim)
        self.act = nn.LeakyReLU()
        net = nn.Sequential(nn.Linear(4, 128), nn.LeakyReLU(), nn.Linear(128, dim * dim))
        self.conv = NNConv(dim, dim, net, aggr="mean")
        self.gru = nn.GRU(dim, dim)
        self.set2set = Set2Set(dim, processing_steps=3)
        self.lin3 = nn.Linear(dim * 2, 1)
        self.num_conv_steps = num_conv_steps

    def forward(
        self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, batch: Tensor, num_graphs: int
    ) -> Tensor:
        """``[num_graphs]`` predictions for a batch of `mol_arrays` graphs."""
        out = self.act(self.lin0(x))
        h = out.unsqueeze(0)
        for _ in range(self.num_conv_steps):
            m = self.act(self.conv(out, edge_index, edge_attr))
            out, h = self.gru(m.unsqueeze(0).contiguous(), h.contiguous())
            out = out.squeeze(0)
        pooled = self.set2set(out, batch, dim_size=num_graphs)
        return self.lin3(pooled).reshape(-1)


def mol_arrays(mol: Any) -> dict[str, np.ndarray]:
    """gflownet's ``mol2graph`` of a sanitised RDKit molecule: ``x`` ``[atoms, 71]``,
    ``edge_index`` ``[2, 2 * bonds]`` (sorted by source then target), ``edge_attr``
    ``[2 * bonds, 4]`` (float32)."""
    from rdkit.Chem.rdchem import BondType, HybridizationType

    atoms = mol.GetAtoms()
    x = np.zeros((len(atoms), NUM_FEAT), np.float32)
    for i, atom in enumerate(atoms):
        x[i, ATOM_TYPES.get(atom.GetSymbol(), 5)] = 1
        x[i, 14 + atom.GetAtomicNum() - 1] = 1
        x[i, 9] = atom.GetIsAromatic()
        hybrid = atom.GetHybridization()
        x[i, 10] = hybrid == HybridizationType.SP
        x[i, 11] = hybrid == HybridizationType.SP2
        x[i, 12] = hybrid == HybridizationType.SP3
        x[i, 13] = atom.GetTotalNumHs(includeNeighbors=True)
    kinds = {BondType.DOUBLE: 1, BondType.TRIPLE: 2, BondType.AROMATIC: 3}
    bonds = [
        (b.GetBeginAtomIdx(), b.GetEndAtomIdx(), kinds.get(b.GetBondType(), 0))
        for b in mol.GetBonds()
    ]
    if not bonds:
        return {
            "x": x,
            "edge_index": np.zeros((2, 1), np.int64),
            "edge_attr": np.zeros((1, 4), np.float32),
        }
    pairs = np.array([(a, b) for a, b, _ in bonds] + [(b, a) for a, b, _ in bonds], np.int64)
    kind = np.array([k for *_, k in bonds] * 2, np.int64)
    order = np.argsort(pairs[:, 0] * len(atoms) + pairs[:, 1], kind="stable")
    edge_attr = np.zeros((len(kind), 4), np.float32)
    edge_attr[np.arange(len(kind)), kind[order]] = 1
    return {"x": x, "edge_index": np.ascontiguousarray(pairs[order].T), "edge_attr": edge_attr}


def collate_mols(graphs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One batch of `mol_arrays` graphs: node ids offset, ``batch`` the graph of each atom."""
    sizes = [g["x"].shape[0] for g in graphs]
    offsets = np.cumsum([0] + sizes[:-1])
    return {
        "x": np.concatenate([g["x"] for g in graphs]),
        "edge_index": np.concatenate(
            [g["edge_index"] + off for g, off in zip(graphs, offsets, strict=True)], axis=1
        ),
        "edge_attr": np.concatenate([g["edge_attr"] for g in graphs]),
        "batch": np.repeat(np.arange(len(graphs)), sizes),
    }


class _ArraysOnly(pickle.Unpickler):
    """Unpickles numpy arrays and plain containers, nothing else (the file is a download)."""

    ALLOWED = {"_reconstruct", "ndarray", "dtype", "scalar", "_frombuffer"}

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] == "numpy" and name in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a parameter file")


def load_params(path: Path) -> list[np.ndarray]:
    """The parameter arrays of a ``best_params.pkl.gz``-format file."""
    with gzip.open(path, "rb") as handle:
        params = _ArraysOnly(handle).load()
    if not isinstance(params, (list, tuple)) or len(params) <= max(PARAM_MAP.values()):
        raise ValueError(f"{path}: not a list of at least {max(PARAM_MAP.values()) + 1} arrays")
    return list(params)


def load_proxy(path: Path | None, seed: int = 0) -> MPNNet:
    """The proxy with the weights of ``path`` (load_original_model's mapping), or, when
    ``path`` is None, the stand-in: the same network with seeded random weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MPNNet()
    if path is not None:
        params = load_params(path)
        for name, index in PARAM_MAP.items():
            param = model.get_parameter(name)
            value = torch.as_tensor(np.asarray(params[index], np.float32))
            if value.shape != param.shape:
                raise ValueError(
                    f"{path}: {name} has shape {tuple(value.shape)}, not {tuple(param.shape)}"
                )
            param.data = value.clone()
    return model.eval().requires_grad_(False)


def flat_reward(pred: Tensor) -> Tensor:
    """``SEHTask``'s flat reward of proxy predictions: ``pred / 8`` in ``[1e-4, 100]``
    (NaN: 0 before the clip)."""
    return (torch.nan_to_num(pred, nan=0.0) / 8).clip(1e-4, 100)


def log_reward(pred: Tensor, beta: Tensor) -> Tensor:
    """``SEHTask``'s log-reward of proxy predictions at inverse temperature ``beta``."""
    return beta * flat_reward(pred).clamp_min(1e-30).log()
