"""The policy: gflownet's ``GraphTransformerGFN`` (``models/graph_transformer.py``).

`GraphTransformer`: node, edge and conditioning features embedded by 3-layer MLPs (width
``num_emb``); one *virtual node* per graph holds the conditioning embedding and is linked
both ways to every node of its graph (those links' features: 1 in the first column),
self-loops added (features: the mean of the incoming ones). ``num_layers`` pre-LN blocks:
graph-wise LayerNorm (no affine), `GENConv` (sum), `TransformerConv` (2 heads, edge
features) over ``[h, GENConv(h)]``, a linear back to ``num_emb``, scaled and shifted by
the block's FiLM of the conditioning, residual; then LayerNorm, a 4x feed-forward,
residual. Graph embedding: mean of the node embeddings next to the virtual node's.

`GraphTransformerGFN`: one linear head per forward action type (gflownet's default of no
hidden MLP layer): Stop from the graph embedding, AddNode per node, SetEdgeAttr per edge
from its two ends' embeddings (ordered), masked as gflownet masks (``x * m - 1000 (1 -
m)``); a per-graph output head; ``logZ``, a 3-layer MLP of the conditioning (width
``2 num_emb``). gflownet's torch_scatter calls are torch_geometric's or torch's here.
"""

from __future__ import annotations

import torch
from batching import GraphBatch
from torch import Tensor, nn


def mlp(n_in: int, n_hid: int, n_out: int, n_layer: int) -> nn.Sequential:
    """Linear layers with LeakyReLU between them, ``n_layer`` hidden layers."""
    sizes = [n_in] + [n_hid] * n_layer + [n_out]
    layers: list[nn.Module] = []
    for i in range(n_layer + 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.LeakyReLU()]
    return nn.Sequential(*layers[:-1])


class Block(nn.Module):
    """One transformer block (gflownet's seven modules per layer, same order)."""

    def __init__(self, num_emb: int, num_heads: int) -> None:
        super().__init__()
        from torch_geometric.nn import GENConv, LayerNorm, TransformerConv

        self.gen = GENConv(num_emb, num_emb, num_layers=1, aggr="add", norm=None)
        self.trans = TransformerConv(num_emb * 2, num_emb, edge_dim=num_emb, heads=num_heads)
        self.linear = nn.Linear(num_heads * num_emb, num_emb)
        self.norm1 = LayerNorm(num_emb, affine=False)
        self.ff = mlp(num_emb, num_emb * 4, num_emb, 1)
        self.norm2 = LayerNorm(num_emb, affine=False)
        self.cscale = nn.Linear(num_emb, num_emb * 2)

    def forward(
        self, o: Tensor, edge_index: Tensor, e: Tensor, c: Tensor, batch: Tensor, graphs: int
    ) -> Tensor:
        cs = self.cscale(c[batch])
        o_norm = self.norm1(o, batch, batch_size=graphs)
        agg = self.gen(o_norm, edge_index, e)
        l_h = self.linear(self.trans(torch.cat([o_norm, agg], 1), edge_index, e))
        scale, shift = cs[:, : l_h.shape[1]], cs[:, l_h.shape[1] :]
        o = o + l_h * scale + shift
        return o + self.ff(self.norm2(o, batch, batch_size=graphs))


class GraphTransformer(nn.Module):
    """Node embeddings ``[N, num_emb]`` and graph embeddings ``[G, 2 num_emb]``."""

    def __init__(
        self, x_dim: int, e_dim: int, g_dim: int, num_emb: int, num_layers: int, num_heads: int
    ) -> None:
        super().__init__()
        self.x2h = mlp(x_dim, num_emb, num_emb, 2)
        self.e2h = mlp(e_dim, num_emb, num_emb, 2)
        self.c2h = mlp(g_dim, num_emb, num_emb, 2)
        self.blocks = nn.ModuleList(Block(num_emb, num_heads) for _ in range(num_layers))

    def forward(self, g: GraphBatch, cond: Tensor) -> tuple[Tensor, Tensor]:
        from torch_geometric.nn import global_mean_pool
        from torch_geometric.utils import add_self_loops

        o, e, c = self.x2h(g.x), self.e2h(g.edge_attr), self.c2h(cond)
        n, graphs = g.x.shape[0], cond.shape[0]
        u = torch.arange(n, device=o.device)
        v = g.batch + n
        edge_index = torch.cat([g.edge_index, torch.stack([u, v]), torch.stack([v, u])], 1)
        e_p = torch.zeros((n * 2, e.shape[1]), device=o.device, dtype=e.dtype)
        e_p[:, 0] = 1  # the virtual links' features: a bias term
        edge_index, e = add_self_loops(edge_index, torch.cat([e, e_p], 0), "mean", n + graphs)
        batch = torch.cat([g.batch, torch.arange(graphs, device=o.device)], 0)
        o = torch.cat([o, c], 0)
        for block in self.blocks:
            o = block(o, edge_index, e, c, batch, graphs)
        nodes = o[:n]
        glob = torch.cat([global_mean_pool(nodes, g.batch, size=graphs), o[n:]], 1)
        return nodes, glob


class GraphTransformerGFN(nn.Module):
    """Masked logits of the three forward action tables, and a per-graph output."""

    def __init__(
        self,
        num_node_dim: int,
        num_edge_dim: int,
        num_cond_dim: int,
        num_types: int,
        num_edge_logits: int,
        num_emb: int = 128,
        num_layers: int = 4,
        num_heads: int = 2,
    ) -> None:
        super().__init__()
        self.transf = GraphTransformer(
            num_node_dim, num_edge_dim, num_cond_dim, num_emb, num_layers, num_heads
        )
        self.mlps = nn.ModuleDict(
            {
                "stop": mlp(num_emb * 2, num_emb, 1, 0),
                "add_node": mlp(num_emb, num_emb, num_types, 0),
                "set_edge_attr": mlp(num_emb * 2, num_emb, num_edge_logits, 0),
            }
        )
        self.emb2graph_out = mlp(num_emb * 2, num_emb, 1, 0)
        self.logZ = mlp(num_cond_dim, num_emb * 2, 1, 2)

    def forward(self, g: GraphBatch, cond: Tensor) -> tuple[list[Tensor], Tensor]:
        nodes, glob = self.transf(g, cond)
        row, col = g.edge_index[:, ::2]  # each edge once (both directions are stored)
        edges = torch.cat([nodes[row], nodes[col]], 1)
        raw = [
            self.mlps["stop"](glob),
            self.mlps["add_node"](nodes),
            self.mlps["set_edge_attr"](edges),
        ]
        logits = [x * m + -1000 * (1 - m) for x, m in zip(raw, g.masks(), strict=True)]
        return logits, self.emb2graph_out(glob)
