"""The GFlowNet's networks: a graph-transformer policy, a conditional log Z, a proxy.

The policy follows the design of upstream's graph transformer GFlowNet: node-type
embeddings, one *virtual node* per graph carrying the conditioning (the reward
temperature) and linked to every node (so the empty graph has something to read),
``num_layers`` blocks of a multi-head `torch_geometric.nn.TransformerConv` with edge
features (bond / virtual link), residual connections, layer norms and a feed-forward
layer, then small MLP heads for the three kinds of actions of `env.GraphBuildingEnv`.

The reward is a *proxy*: a fixed GNN with random weights (seeded, never trained), as
upstream scores molecules with a fixed pretrained proxy network (which would have to be
downloaded). Its output is squashed to ``(0, 1)``; ``log R = beta * log(proxy)``.
"""

from __future__ import annotations

import torch
from env import GraphBuildingEnv, States
from torch import Tensor, nn

BOND, VIRTUAL = 0, 1


def thermometer(beta: Tensor, bins: int = 32, high: float = 96.0) -> Tensor:
    """``[B, bins]`` thermometer encoding of the temperature ``beta`` on ``[0, high]``."""
    width = high / bins
    edges = torch.arange(bins, device=beta.device, dtype=torch.float32) * width
    return ((beta.unsqueeze(1) - edges) / width).clamp(0.0, 1.0)


def mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.LeakyReLU(), nn.Linear(hidden, out))


def to_graph(s: States, num_types: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """A torch_geometric-style batch of ``s``: node types (virtual nodes last, type
    ``num_types``), ``edge_index``, edge kinds, graph of each node, and the mask of the
    real nodes in the dense ``[B, M]`` layout (real node ``k`` is ``present.nonzero()[k]``)."""
    b, m = s.types.shape
    device = s.types.device
    present = s.types >= 0
    real = int(present.sum())
    node_of = torch.zeros(b, m, dtype=torch.long, device=device)
    node_of[present] = torch.arange(real, device=device)
    graph_of_real = present.nonzero(as_tuple=True)[0]
    virtual = real + torch.arange(b, device=device)

    g, i, j = s.adj.nonzero(as_tuple=True)  # both directions: adj is symmetric
    bonds = torch.stack([node_of[g, i], node_of[g, j]])
    real_ids = torch.arange(real, device=device)
    to_virtual = torch.stack([real_ids, virtual[graph_of_real]])
    edge_index = torch.cat([bonds, to_virtual, to_virtual.flip(0)], dim=1)
    kinds = torch.cat(
        [
            torch.full((bonds.size(1),), BOND, device=device),
            torch.full((2 * real,), VIRTUAL, device=device),
        ]
    )
    node_types = torch.cat([s.types[present], torch.full((b,), num_types, device=device)])
    graph = torch.cat([graph_of_real, torch.arange(b, device=device)])
    return node_types, edge_index, kinds, graph, present


class Block(nn.Module):
    """Attention over the graph's edges, then a feed-forward layer; both residual."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        from torch_geometric.nn import TransformerConv

        self.attn = TransformerConv(width, width // heads, heads=heads, edge_dim=width)
        self.norm1 = nn.LayerNorm(width)
        self.ff = mlp(width, 4 * width, width)
        self.norm2 = nn.LayerNorm(width)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        x = self.norm1(x + self.attn(x, edge_index, edge_attr))
        return self.norm2(x + self.ff(x))


class GraphTransformerPolicy(nn.Module):
    """Forward-policy logits ``[B, num_actions]`` (illegal actions at -inf)."""

    def __init__(self, env: GraphBuildingEnv, width: int, layers: int, heads: int = 2) -> None:
        super().__init__()
        self.env = env
        self.node_emb = nn.Embedding(env.num_types + 1, width)  # + the virtual node's type
        self.edge_emb = nn.Embedding(2, width)
        self.cond = mlp(32, width, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.stop = mlp(width, width, 1)
        self.first = mlp(width, width, env.num_types)
        self.attach = mlp(2 * width, width, env.num_types)  # node and its graph
        self.bond = mlp(width, width, 1)

    def forward(self, s: States, cond: Tensor) -> Tensor:
        env = self.env
        node_types, edge_index, kinds, graph, present = to_graph(s, env.num_types)
        b, m = s.types.shape
        x = self.node_emb(node_types)
        real = x.size(0) - b
        x = torch.cat([x[:real], x[real:] + self.cond(cond)])
        edge_attr = self.edge_emb(kinds)
        for block in self.blocks:
            x = block(x, edge_index, edge_attr)
        nodes, glob = x[:real], x[real:]

        dense = x.new_zeros(b, m, x.size(1))
        dense[present] = nodes
        per_node = torch.cat([dense, glob.unsqueeze(1).expand(b, m, -1)], dim=-1)
        pair = dense[:, env.pair_a] + dense[:, env.pair_b]
        logits = torch.cat(
            [
                self.stop(glob),
                self.first(glob),
                self.attach(per_node).reshape(b, -1),
                self.bond(pair).squeeze(-1),
            ],
            dim=1,
        )
        return logits.float().masked_fill(~env.legal(s), float("-inf"))


class LogZ(nn.Module):
    """log of the partition function, conditioned on the temperature (as upstream)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = mlp(32, width, 1)

    def forward(self, cond: Tensor) -> Tensor:
        return self.net(cond).squeeze(-1)


class Proxy(nn.Module):
    """The fixed reward model: a small GNN with random weights, never trained."""

    def __init__(self, num_types: int, width: int = 64, layers: int = 2) -> None:
        super().__init__()
        from torch_geometric.nn import GraphConv

        self.num_types = num_types
        self.emb = nn.Embedding(num_types + 1, width)
        self.convs = nn.ModuleList(GraphConv(width, width) for _ in range(layers))
        self.out = mlp(width, width, 1)
        self.requires_grad_(False)

    def forward(self, s: States) -> Tensor:
        """``(0, 1)`` score of each (final) graph."""
        from torch_geometric.nn import global_add_pool

        node_types, edge_index, kinds, graph, _ = to_graph(s, self.num_types)
        bonds = edge_index[:, kinds == BOND]
        x = self.emb(node_types)
        for conv in self.convs:
            x = torch.relu(conv(x, bonds))
        pooled = global_add_pool(x, graph, size=len(s))
        return torch.sigmoid(self.out(pooled).squeeze(-1) / 4.0)
