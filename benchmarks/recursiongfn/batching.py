"""Batches of state graphs and the categorical over their actions (gflownet's
``Batch.from_data_list`` of ``graph_to_Data`` graphs and ``GraphActionCategorical``).

`collate` stacks `env.FragEnv.featurise` arrays (numpy, so that they travel between
processes as plain bytes) with node ids offset, the graph of every node and of every
(deduplicated) edge, and where each graph's nodes and edges start. The three logit
tables of a batch (Stop ``[G, 1]``, AddNode ``[N, types]``, SetEdgeAttr ``[E, 2S]``) are
laid end to end (`flat`): the categorical of graph ``g`` is every entry owned by ``g``.
`log_softmax`, `sample` (Gumbel-max, masked entries never drawn) and `decode` are
gflownet's ``logsoftmax``, ``sample`` and index arithmetic with torch's scatter ops in
place of torch_scatter's (same math: the max subtracted per graph, exponentials clamped
at 1e-38).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

MASKS = ("stop_mask", "add_node_mask", "set_edge_attr_mask")


def collate(graphs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One batch of featurised graphs (see the module docstring)."""
    nodes = np.array([g["x"].shape[0] for g in graphs], np.int64)
    edges = np.array([g["edge_index"].shape[1] // 2 for g in graphs], np.int64)
    node_start = np.concatenate([[0], np.cumsum(nodes)[:-1]])
    edge_start = np.concatenate([[0], np.cumsum(edges)[:-1]])
    ids = np.arange(len(graphs))
    return {
        "x": np.concatenate([g["x"] for g in graphs]),
        "edge_index": np.concatenate(
            [g["edge_index"] + s for g, s in zip(graphs, node_start, strict=True)], axis=1
        ),
        "edge_attr": np.concatenate([g["edge_attr"] for g in graphs]),
        "batch": np.repeat(ids, nodes),
        "edge_batch": np.repeat(ids, edges),
        "node_start": node_start,
        "edge_start": edge_start,
        **{m: np.concatenate([g[m] for g in graphs]) for m in MASKS},
    }


@dataclass
class GraphBatch:
    """`collate`'s arrays as tensors on one device."""

    x: Tensor
    edge_index: Tensor
    edge_attr: Tensor
    batch: Tensor
    edge_batch: Tensor
    node_start: Tensor
    edge_start: Tensor
    stop_mask: Tensor
    add_node_mask: Tensor
    set_edge_attr_mask: Tensor

    @classmethod
    def of(cls, arrays: dict[str, np.ndarray | Tensor], device: torch.device | str) -> GraphBatch:
        fields = cls.__dataclass_fields__
        return cls(**{k: torch.as_tensor(arrays[k]).to(device, non_blocking=True) for k in fields})

    @property
    def num_graphs(self) -> int:
        return self.node_start.shape[0]

    def masks(self) -> list[Tensor]:
        return [self.stop_mask, self.add_node_mask, self.set_edge_attr_mask]

    def owners(self) -> Tensor:
        """The graph owning each entry of the `flat` layout."""
        g = self.num_graphs
        return torch.cat(
            [
                torch.arange(g, device=self.batch.device),
                self.batch.repeat_interleave(self.add_node_mask.shape[1]),
                self.edge_batch.repeat_interleave(self.set_edge_attr_mask.shape[1]),
            ]
        )


def flat(tables: list[Tensor]) -> Tensor:
    """The logit (or mask) tables end to end."""
    return torch.cat([t.reshape(-1) for t in tables])


def log_softmax(logits: Tensor, owner: Tensor, num_graphs: int) -> Tensor:
    """Log-probabilities of the `flat` logits, normalised over each graph's entries."""
    low = torch.finfo(logits.dtype).min
    top = logits.new_full((num_graphs,), low).scatter_reduce(
        0, owner, logits.detach(), "amax", include_self=True
    )
    shifted = logits - top[owner]
    total = logits.new_zeros(num_graphs).index_add(0, owner, shifted.exp().clamp_min(1e-38))
    return shifted - total.log()[owner]


def sample(logits: Tensor, mask: Tensor, owner: Tensor, num_graphs: int) -> Tensor:
    """One `flat` index per graph drawn from its categorical (Gumbel-max); masked
    entries (``mask == 0``) are never drawn."""
    low = torch.finfo(logits.dtype).min
    noise = torch.rand_like(logits)
    gumbel = logits - (-noise.log()).log()
    floor = torch.nextafter(torch.tensor(low), torch.tensor(0.0)).to(logits)
    gumbel = torch.where(mask == 1, torch.maximum(gumbel, floor), torch.full_like(logits, low))
    top = gumbel.new_full((num_graphs,), low).scatter_reduce(
        0, owner, gumbel, "amax", include_self=True
    )
    hit = gumbel == top[owner]
    where = torch.arange(logits.numel(), device=logits.device)
    first = torch.full((num_graphs,), logits.numel(), device=logits.device)
    return first.scatter_reduce(0, owner[hit], where[hit], "amin", include_self=True)


def decode(index: np.ndarray, arrays: dict[str, np.ndarray]) -> list[tuple[int, int, int]]:
    """The ``(type, row within its graph, column)`` actions of `flat` indices, one per graph."""
    g = arrays["node_start"].shape[0]
    n, types = arrays["add_node_mask"].shape
    cols = arrays["set_edge_attr_mask"].shape[1]
    actions = []
    for graph, i in enumerate(index.tolist()):
        if i < g:
            actions.append((0, 0, 0))
        elif i < g + n * types:
            node, col = divmod(i - g, types)
            actions.append((1, node - int(arrays["node_start"][graph]), col))
        else:
            edge, col = divmod(i - g - n * types, cols)
            actions.append((2, edge - int(arrays["edge_start"][graph]), col))
    return actions


def encode(actions: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The `flat` index of each graph's ``(type, row, column)`` action (``[G, 3]``)."""
    g = arrays["node_start"].shape[0]
    n, types = arrays["add_node_mask"].shape
    cols = arrays["set_edge_attr_mask"].shape[1]
    kind, row, col = actions[:, 0], actions[:, 1], actions[:, 2]
    ids = np.arange(g)
    add = g + (arrays["node_start"] + row) * types + col
    edge = g + n * types + (arrays["edge_start"] + row) * cols + col
    return np.where(kind == 0, ids, np.where(kind == 1, add, edge)).astype(np.int64)
