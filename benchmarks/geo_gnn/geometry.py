"""Radius graph and DimeNet triplets in plain torch.

Why: torch_geometric's `DimeNet.forward` builds its graph with `radius_graph` (needs the
compiled `pyg-lib` or `torch-cluster`) and enumerates angle triplets with `SparseTensor`
(needs the compiled `torch-sparse`). Neither has a wheel for the pinned torch on PyPI
(pyg-lib is not there at all; torch-cluster and torch-sparse are source-only, last released
in 2023), so the benchmark would not install from the registries. These two functions give
the same edges and triplets with dense per-molecule tensor ops (molecules have a few dozen
atoms: an ``[B, n, n]`` distance block is cheap) and `use_plain_torch_graph_ops` makes
`DimeNet` call them. The model's own forward (basis functions, embedding, interaction and
output blocks, their gathers and scatters) is untouched: same computational shape.

Torch only (no torch_geometric import here), so the functions are tested on their own.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _graph_layout(batch: Tensor, num_nodes: int) -> tuple[Tensor, Tensor, int]:
    """(first node of each graph, position of each node inside its graph, largest graph).

    ``batch`` must be sorted (torch_geometric batches are)."""
    num_graphs = int(batch.max()) + 1 if num_nodes else 0
    counts = torch.bincount(batch, minlength=num_graphs)
    ptr = torch.zeros(num_graphs + 1, dtype=torch.long, device=batch.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    local = torch.arange(num_nodes, device=batch.device) - ptr[batch]
    return ptr, local, int(counts.max()) if num_graphs else 0


def radius_graph(
    pos: Tensor,
    r: float,
    batch: Tensor | None = None,
    loop: bool = False,
    max_num_neighbors: int | None = 32,
    flow: str = "source_to_target",
) -> Tensor:
    """Edges between atoms of the same graph at distance ``<= r``, as ``[2, E]``.

    Same contract as `torch_geometric.nn.radius_graph`: with ``source_to_target`` the
    first row is the neighbour (source ``j``), the second the centre (target ``i``); each
    centre keeps at most ``max_num_neighbors`` neighbours, the lowest-numbered ones
    (None: all). Edges come sorted by centre, then neighbour.
    """
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"unknown flow {flow!r}")
    num_nodes = pos.size(0)
    if batch is None:
        batch = torch.zeros(num_nodes, dtype=torch.long, device=pos.device)
    ptr, local, width = _graph_layout(batch, num_nodes)
    num_graphs = ptr.numel() - 1
    dense = pos.new_zeros(num_graphs, width, pos.size(1))
    valid = torch.zeros(num_graphs, width, dtype=torch.bool, device=pos.device)
    dense[batch, local] = pos
    valid[batch, local] = True

    diff = dense.unsqueeze(2) - dense.unsqueeze(1)  # [B, n, n, 3]: centre i, neighbour j
    close = diff.pow(2).sum(-1) <= r * r
    close &= valid.unsqueeze(2) & valid.unsqueeze(1)
    if not loop:
        close &= ~torch.eye(width, dtype=torch.bool, device=pos.device)
    if max_num_neighbors is not None:
        close &= close.cumsum(-1) <= max_num_neighbors
    graph, centre, neighbour = close.nonzero(as_tuple=True)
    centre = centre + ptr[graph]
    neighbour = neighbour + ptr[graph]
    if flow == "source_to_target":
        return torch.stack([neighbour, centre])
    return torch.stack([centre, neighbour])


def triplets(
    edge_index: Tensor, num_nodes: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Angle triplets ``k -> j -> i`` of a directed graph, as DimeNet consumes them.

    For every edge ``j -> i`` (``edge_index[:, e] = (j, i)``) and every edge ``k -> j``
    with ``k != i``: one triplet. Returns ``(i, j, idx_i, idx_j, idx_k, idx_kj, idx_ji)``
    like `torch_geometric.nn.models.dimenet.triplets`: the target and source of every
    edge, the three node indices of every triplet and the indices of its two edges.
    """
    row, col = edge_index  # row: source j, col: target i
    device = row.device
    num_edges = row.numel()
    # Edges grouped by their target: the edges into node v are by_target[start[v]:start[v+1]].
    by_target = torch.argsort(col, stable=True)
    into = torch.bincount(col, minlength=num_nodes)
    start = torch.zeros(num_nodes + 1, dtype=torch.long, device=device)
    torch.cumsum(into, 0, out=start[1:])

    per_edge = into[row]  # for edge j -> i: every edge k -> j
    idx_ji = torch.repeat_interleave(torch.arange(num_edges, device=device), per_edge)
    first = torch.cumsum(per_edge, 0) - per_edge
    offset = torch.arange(idx_ji.numel(), device=device) - first[idx_ji]
    idx_kj = by_target[start[row[idx_ji]] + offset]

    idx_i = col[idx_ji]
    idx_j = row[idx_ji]
    idx_k = row[idx_kj]
    keep = idx_i != idx_k
    return col, row, idx_i[keep], idx_j[keep], idx_k[keep], idx_kj[keep], idx_ji[keep]


def use_plain_torch_graph_ops() -> None:
    """Make torch_geometric's DimeNet (and DimeNet++) build its graph with the functions
    above instead of the compiled extensions (see the module docstring).

    Always applied, not only when the extensions are missing, so that every machine runs
    the same code and results stay comparable."""
    from torch_geometric.nn.models import dimenet

    dimenet.radius_graph = radius_graph
    dimenet.triplets = triplets
