"""The fragment environment of gflownet's SEH task (``FragMolBuildingEnvContext``).

A state is a tree of at most ``max_frags`` fragments (`fragments.FRAGMENTS`). Forward
actions, as ``(type, row, column)`` of three logit tables, in gflownet's order:

* ``(0, 0, 0)`` Stop: legal once the graph has a node and every edge has both its
  attachment atoms set;
* ``(1, node, f)`` AddNode: a fragment of type ``f`` bonded to ``node`` (on the empty
  graph: the first fragment, ``node`` 0); legal on a node with fewer edges than
  attachment atoms, nowhere once ``max_frags`` fragments are there;
* ``(2, edge, c)`` SetEdgeAttr: edge ``(u, v)``, ``u < v``, bonds through attachment atom
  ``c`` of ``u`` (``c < S``) or ``c - S`` of ``v``, ``S`` the most attachment atoms of
  any fragment; legal when that end is unset and the atom is not used by another edge.

`featurise` builds the arrays gflownet's ``graph_to_Data`` builds (one-hot node types, the
empty graph as one node flagged in the last column, edges in both directions with their
attachment one-hots, the three masks). `to_mol` assembles the molecule atom-exactly with
RDKit (fragments combined, single bonds between attachment atoms, one explicit H popped
from each bonded atom, sanitised); `is_sane` is gflownet's validity test. The backward
policy is uniform: `count_backward` counts the parents as gflownet's
``count_backward_transitions`` does for these trees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fragments import FRAGMENTS

STOP, ADD_NODE, SET_EDGE_ATTR = 0, 1, 2


@dataclass
class FragGraph:
    """A fragment tree: node types, edges ``(u, v)`` with ``u < v`` sorted by ``u`` then
    ``v`` (networkx's order for these trees), and each edge's attachment indices ``[of u,
    of v]`` (-1: not set yet)."""

    types: list[int] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    attach: list[list[int]] = field(default_factory=list)
    cache: dict[str, np.ndarray] | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.types)

    def copy(self) -> FragGraph:
        return FragGraph(list(self.types), list(self.edges), [list(a) for a in self.attach])


class FragEnv:
    """The rules, the featurisation and the chemistry of the fragment task."""

    def __init__(self, max_frags: int = 9, fragments: tuple = FRAGMENTS) -> None:
        from rdkit import Chem, RDLogger

        RDLogger.DisableLog("rdApp.*")  # as gflownet: invalid molecules are expected
        self.max_frags = max_frags
        self.smiles = [smi for smi, _ in fragments]
        self.stems = [tuple(stems) for _, stems in fragments]
        self.mols = [Chem.MolFromSmiles(smi) for smi in self.smiles]
        self.num_atoms = [m.GetNumAtoms() for m in self.mols]
        self.num_types = len(fragments)
        self.num_stems = max(len(s) for s in self.stems)  # S
        self.num_node_dim = self.num_types + 1
        self.num_edge_dim = (self.num_stems + 1) * 2
        self.num_edge_logits = self.num_stems * 2

    # -- the rules ----------------------------------------------------------------------

    def step(self, g: FragGraph, action: tuple[int, int, int]) -> FragGraph:
        """The child of ``g`` by a legal forward action (not Stop); ValueError otherwise."""
        kind, row, col = action
        child = g.copy()
        if kind == ADD_NODE:
            if len(g) == 0:
                child.types.append(col)
                return child
            if not 0 <= row < len(g) or len(g) >= self.max_frags:
                raise ValueError(f"AddNode on node {row} of a {len(g)}-fragment graph")
            # networkx's edge order, which gflownet's rows follow: by first end, then age
            at = sum(u <= row for u, _ in g.edges)
            child.types.append(col)
            child.edges.insert(at, (row, len(g)))
            child.attach.insert(at, [-1, -1])
            return child
        if kind == SET_EDGE_ATTR:
            end, stem = divmod(col, self.num_stems)
            if child.attach[row][end] >= 0:
                raise ValueError(f"edge {row} already has its attachment {end}")
            child.attach[row][end] = stem
            return child
        raise ValueError(f"not a forward action that changes the graph: {action}")

    def count_backward(self, g: FragGraph) -> int:
        """Parents of ``g`` (gflownet's count without the isomorphism check): one per set
        attachment, one per leaf whose edge has none set, one for a lone fragment."""
        if len(g) == 1:
            return 1
        degree = [0] * len(g)
        for u, v in g.edges:
            degree[u] += 1
            degree[v] += 1
        count = sum(a >= 0 for pair in g.attach for a in pair)
        for (u, v), pair in zip(g.edges, g.attach, strict=True):
            if pair == [-1, -1]:
                count += (degree[u] == 1) + (degree[v] == 1)
        return count

    # -- what the policy sees -----------------------------------------------------------

    def featurise(self, g: FragGraph) -> dict[str, np.ndarray]:
        """gflownet's ``graph_to_Data`` arrays (cached on ``g``): ``x`` ``[max(1, n),
        types+1]``, ``edge_index`` ``[2, 2E]`` (each edge then its reverse),
        ``edge_attr`` ``[2E, 2(S+1)]``, ``stop_mask`` ``[1, 1]``, ``add_node_mask``
        ``[max(1, n), types]``, ``set_edge_attr_mask`` ``[E, 2S]`` (float32 0/1)."""
        if g.cache is not None:
            return g.cache
        n, e, s = len(g), len(g.edges), self.num_stems
        x = np.zeros((max(1, n), self.num_node_dim), np.float32)
        x[0, -1] = n == 0
        x[np.arange(n), g.types] = 1
        edge_attr = np.zeros((2 * e, self.num_edge_dim), np.float32)
        edge_mask = np.zeros((e, self.num_edge_logits), np.float32)
        degree = np.zeros(n, np.int64)
        used: list[set[int]] = [set() for _ in range(n)]
        for (u, v), (a, b) in zip(g.edges, g.attach, strict=True):
            degree[u] += 1
            degree[v] += 1
            if a >= 0:
                used[u].add(a)
            if b >= 0:
                used[v].add(b)
        unfilled = False
        for i, ((u, v), pair) in enumerate(zip(g.edges, g.attach, strict=True)):
            for j, node in enumerate((u, v)):
                idx = pair[j] + 1
                edge_attr[2 * i, idx + (s + 1) * j] = 1
                edge_attr[2 * i + 1, idx + (s + 1) * (1 - j)] = 1
                if pair[j] < 0:
                    unfilled = True
                    for stem in range(len(self.stems[g.types[node]])):
                        if stem not in used[node]:
                            edge_mask[i, stem + s * j] = 1
        edge_index = (
            np.array([p for u, v in g.edges for p in ((u, v), (v, u))], np.int64).reshape(-1, 2).T
        )
        if n == self.max_frags:
            add_mask = np.zeros((n, self.num_types), np.float32)
        elif n == 0:
            add_mask = np.ones((1, self.num_types), np.float32)
        else:
            room = degree < np.array([len(self.stems[t]) for t in g.types])
            add_mask = np.repeat(room.astype(np.float32)[:, None], self.num_types, axis=1)
        stop = np.full((1, 1), 0.0 if unfilled or n == 0 else 1.0, np.float32)
        g.cache = {
            "x": x,
            "edge_index": np.ascontiguousarray(edge_index),
            "edge_attr": edge_attr,
            "stop_mask": stop,
            "add_node_mask": add_mask,
            "set_edge_attr_mask": edge_mask,
        }
        return g.cache

    # -- chemistry ----------------------------------------------------------------------

    def to_mol(self, g: FragGraph) -> Any:
        """The sanitised RDKit molecule of a complete graph (gflownet's ``graph_to_mol``);
        raises (RDKit's error, or ValueError for an unset attachment) when it cannot."""
        from rdkit import Chem

        offsets = np.cumsum([0] + [self.num_atoms[t] for t in g.types])
        combined = self.mols[g.types[0]]
        for t in g.types[1:]:
            combined = Chem.CombineMols(combined, self.mols[t])
        editable = Chem.EditableMol(combined)
        bonded: list[int] = []
        for (u, v), (a, b) in zip(g.edges, g.attach, strict=True):
            if a < 0 or b < 0:
                raise ValueError("an edge without both attachment atoms")
            atom_u = int(self.stems[g.types[u]][a] + offsets[u])
            atom_v = int(self.stems[g.types[v]][b] + offsets[v])
            bonded += [atom_u, atom_v]
            editable.AddBond(atom_u, atom_v, Chem.BondType.SINGLE)
        mol = editable.GetMol()
        for idx in bonded:
            atom = mol.GetAtomWithIdx(idx)
            if atom.GetNumExplicitHs() > 0:
                atom.SetNumExplicitHs(atom.GetNumExplicitHs() - 1)
        Chem.SanitizeMol(mol)
        return mol

    def is_sane(self, g: FragGraph) -> bool:
        """gflownet's ``is_sane``: the molecule assembles, and its SMILES parses back."""
        from rdkit import Chem

        try:
            mol = self.to_mol(g)
            return Chem.MolFromSmiles(Chem.MolToSmiles(mol)) is not None
        except Exception:  # noqa: BLE001 - any RDKit failure makes the molecule invalid
            return False
