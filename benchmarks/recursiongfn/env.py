"""A graph-building environment for a GFlowNet, stepped for a whole batch at once.

Why this shape: upstream's workload (recursionpharma's gflownet, fragment-based molecule
generation) builds a molecule of at most 9 fragments out of a vocabulary of 72, one
action at a time: add a fragment attached to an existing one, connect two fragments, or
stop. Here a state is a graph of at most ``max_nodes`` typed nodes (``num_types`` types)
whose degree is capped (a valence), kept as dense tensors on the device for the whole
batch (``types [B, M]``, ``adj [B, M, M]``), so that stepping 128 trajectories is a few
tensor operations rather than 128 Python objects.

Actions of one state, in one fixed layout of ``action_dim(M, V)`` logits:

* ``0``: stop (legal once the graph has a node),
* ``1 .. V``: the first node, of type ``t`` (legal on the empty graph only),
* ``1 + V + m * V + t``: a new node of type ``t`` bonded to node ``m``,
* ``1 + V + M * V + p``: a bond between the two nodes of pair ``p`` (``a < b``).

After ``max_steps`` actions only stop is legal, so a trajectory has at most
``max_steps + 1`` transitions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def action_dim(max_nodes: int, num_types: int) -> int:
    """Number of logits per state (see the module docstring)."""
    return 1 + num_types + max_nodes * num_types + max_nodes * (max_nodes - 1) // 2


@dataclass
class States:
    """A batch of graphs: ``types`` (-1 where no node), ``adj`` (symmetric), ``n`` (nodes),
    ``steps`` (actions taken so far)."""

    types: Tensor
    adj: Tensor
    n: Tensor
    steps: Tensor

    def __getitem__(self, index: Tensor) -> States:
        return States(self.types[index], self.adj[index], self.n[index], self.steps[index])

    def __len__(self) -> int:
        return self.types.size(0)

    @staticmethod
    def cat(parts: list[States]) -> States:
        return States(
            torch.cat([p.types for p in parts]),
            torch.cat([p.adj for p in parts]),
            torch.cat([p.n for p in parts]),
            torch.cat([p.steps for p in parts]),
        )


class GraphBuildingEnv:
    """The rules: legal-action masks, transitions and the backward-policy count."""

    def __init__(
        self,
        max_nodes: int = 9,
        num_types: int = 72,
        max_degree: int = 4,
        max_steps: int = 16,
        device: torch.device | str = "cpu",
    ) -> None:
        self.max_nodes = max_nodes
        self.num_types = num_types
        self.max_degree = max_degree
        self.max_steps = max_steps
        self.device = torch.device(device)
        self.num_actions = action_dim(max_nodes, num_types)
        pairs = torch.triu_indices(max_nodes, max_nodes, offset=1, device=self.device)
        self.pair_a, self.pair_b = pairs[0], pairs[1]
        self.node_base = 1 + num_types
        self.edge_base = self.node_base + max_nodes * num_types

    def empty(self, batch: int) -> States:
        m, dev = self.max_nodes, self.device
        return States(
            torch.full((batch, m), -1, dtype=torch.long, device=dev),
            torch.zeros(batch, m, m, dtype=torch.bool, device=dev),
            torch.zeros(batch, dtype=torch.long, device=dev),
            torch.zeros(batch, dtype=torch.long, device=dev),
        )

    def legal(self, s: States) -> Tensor:
        """``[B, num_actions]`` boolean mask of the legal actions of each state."""
        b, m, v = len(s), self.max_nodes, self.num_types
        degree = s.adj.sum(-1)
        slot = torch.arange(m, device=self.device)
        present = slot < s.n.unsqueeze(1)
        has_room = (s.n < m).unsqueeze(1)
        open_ = present & (degree < self.max_degree)
        stop = (s.n > 0).unsqueeze(1)
        first = (s.n == 0).unsqueeze(1).expand(b, v)
        attach = (open_ & has_room).unsqueeze(2).expand(b, m, v).reshape(b, m * v)
        a, c = self.pair_a, self.pair_b
        bond = open_[:, a] & open_[:, c] & ~s.adj[:, a, c]
        mask = torch.cat([stop, first, attach, bond], dim=1)
        out_of_steps = (s.steps >= self.max_steps).unsqueeze(1)
        only_stop = torch.zeros_like(mask)
        only_stop[:, 0] = True
        return torch.where(out_of_steps, only_stop & mask, mask)

    def step(self, s: States, actions: Tensor) -> tuple[States, Tensor]:
        """Apply one action per state; returns the new states and which ones stopped."""
        types, adj, n = s.types.clone(), s.adj.clone(), s.n.clone()
        rows = torch.arange(len(s), device=self.device)
        stop = actions == 0
        first = (actions >= 1) & (actions < self.node_base)
        attach = (actions >= self.node_base) & (actions < self.edge_base)
        bond = actions >= self.edge_base

        code = (actions - 1).clamp_min(0)
        types[rows[first], 0] = code[first]
        node_code = (actions - self.node_base).clamp_min(0)
        r, new = rows[attach], n[attach]
        anchor = node_code[attach] // self.num_types
        types[r, new] = node_code[attach] % self.num_types
        adj[r, anchor, new] = True
        adj[r, new, anchor] = True
        pair = (actions - self.edge_base).clamp_min(0)[bond]
        r = rows[bond]
        adj[r, self.pair_a[pair], self.pair_b[pair]] = True
        adj[r, self.pair_b[pair], self.pair_a[pair]] = True
        n = n + (first | attach).long()
        return States(types, adj, n, s.steps + 1), stop

    def log_backward(self, child: States, stopped: Tensor) -> Tensor:
        """log P_B(parent | child) of a uniform backward policy.

        Its support would be every deletion that leads back to a valid (connected)
        graph; we count the leaves (removable nodes) plus the bonds beyond a spanning
        tree (each removable without disconnecting the graph), an approximation that
        costs the same tensor work. A stop transition has one parent (log 1 = 0)."""
        degree = child.adj.sum(-1)
        present = torch.arange(self.max_nodes, device=self.device) < child.n.unsqueeze(1)
        leaves = (present & (degree <= 1)).sum(1)
        bonds = child.adj.sum((1, 2)) // 2
        cycles = (bonds - (child.n - 1)).clamp_min(0)
        count = (leaves + cycles).clamp_min(1).float()
        return torch.where(stopped, torch.zeros_like(count), -torch.log(count))
