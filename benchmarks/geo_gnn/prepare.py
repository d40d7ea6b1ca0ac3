"""Prepare the molecules that ``pna`` and ``dimenet`` train on (idempotent).

Gets the same argv as main.py; ``--data``, ``--num-samples`` and ``--model`` matter here
(the data does not follow the training ``--seed``). Two kinds of data set, side by side
under ``<data>``, each with its ``<name>.done`` marker (written last, holding what it was
built from: another size or input builds another) and a ``stats.json`` (target mean and
population standard deviation, in-degree histogram, atom and bond counts) that main.py
reads instead of scanning the database at start-up as upstream does:

* ``pcqm4mv2-<num-samples>/``, **upstream's molecules**: for an entry whose upstream
  inputs (``benchshared.catalogue``) include ``pcqm4mv2`` (``dimenet``), the input is
  fetched (``benchshared.inputs.fetch``) and its first molecules turned into graphs as
  upstream's ``PCQM4Mv2Subset`` does (`pcqm4mv2.py`, RDKit);
* ``molecules-<num-samples>/``, the **stand-in** (`molecules.py`: generated,
  PCQM4Mv2-shaped): for other entries (``pna``), and for ``dimenet`` when the input could
  not be fetched or RDKit is missing (said on one line: such a run is not comparable
  with upstream milabench).

Both hold upstream's SQLite schema (``processed/sqlite.db``, `molecules.MoleculeDB`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from molecules import (
    check_distances,
    dataset_name,
    generate,
    generation_params,
    in_degree_histogram,
    target_stats,
    write_db,
)
from pcqm4mv2 import (
    INPUT,
    InputError,
    check_train_order,
    graphs,
    subset_name,
    subset_params,
)

from benchshared.datasets import data_dir, is_prepared, prepared
from benchshared.inputs import read_manifest

FOLDER = "geo_gnn"
STATS = "stats.json"
#: The entry a script run by hand stands for, per ``--model``.
DEFAULT_ENTRY = {"PNA": "pna", "DimeNet": "dimenet"}
WRITE_BATCH = 1000  # rows per insert (upstream writes batch-wise too)
PROGRESS = 20_000  # molecules between two progress lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help=f"default: $MILABENCH_DIR_DATA/{FOLDER}")
    parser.add_argument("--num-samples", type=int, default=100_000)
    parser.add_argument("--model", default="PNA", help="PNA or DimeNet (names the entry)")
    args, _unknown = parser.parse_known_args(argv)
    return args


def entry_name(model: str) -> str:
    """The suite entry being prepared or run (``MILABENCH_CONFIG``'s name; by hand: the
    model's entry, `DEFAULT_ENTRY`)."""
    try:
        name = json.loads(os.environ.get("MILABENCH_CONFIG") or "{}").get("name")
    except (ValueError, AttributeError):
        name = None
    return str(name or DEFAULT_ENTRY.get(model, "dimenet"))


def wants_real_molecules(entry: str) -> bool:
    """True when upstream's ``entry`` reads PCQM4Mv2 (the catalogue says which)."""
    from benchshared.catalogue import inputs_for

    return INPUT in inputs_for(entry)


def real_subset(root: Path, num_samples: int, source: Path | None) -> Path | None:
    """The prepared subset of upstream's molecules built from the input folder
    ``source`` (its manifest as it is now), or None when there is none."""
    manifest = read_manifest(source) if source is not None else None
    if manifest is None:
        return None
    name = subset_name(num_samples)
    params = subset_params(num_samples, manifest)
    folder = root / name
    if is_prepared(root, params, marker=f"{name}.done") and (folder / STATS).is_file():
        return folder
    return None


class GraphStats:
    """``stats.json`` of upstream's molecules, gathered one graph at a time: counts, the
    target's mean and population standard deviation (upstream's ``np.mean`` / ``np.std``)
    and the in-degree histogram (upstream's ``train_degree``)."""

    def __init__(self) -> None:
        self.ys: list[float] = []
        self.atoms = 0
        self.directed_bonds = 0
        self.hist = torch.zeros(1, dtype=torch.long)

    def add(self, data: Any) -> None:
        from torch_geometric.utils import degree

        self.ys.append(float(data.y))
        self.atoms += data.num_nodes
        self.directed_bonds += data.edge_index.size(1)
        deg = degree(data.edge_index[1], num_nodes=data.num_nodes, dtype=torch.long)
        counts = torch.bincount(deg)
        if counts.numel() > self.hist.numel():
            grow = counts.numel() - self.hist.numel()
            self.hist = torch.cat([self.hist, self.hist.new_zeros(grow)])
        self.hist[: counts.numel()] += counts

    def result(self) -> dict[str, Any]:
        count = len(self.ys)
        mean = math.fsum(self.ys) / count
        std = math.sqrt(math.fsum((y - mean) ** 2 for y in self.ys) / count)
        return {
            "molecules": count,
            "atoms": self.atoms,
            "bonds": self.directed_bonds // 2,
            "y_mean": mean,
            "y_std": max(std, 1e-6),
            "in_degree_histogram": self.hist.tolist(),
        }


def prepare_real(root: Path, num_samples: int, source: Path) -> Path:
    """The subset of the first ``num_samples`` molecules of the PCQM4Mv2 input folder
    ``source`` under ``root``, built unless already there (`pcqm4mv2.py`)."""
    from molecules import MoleculeDB

    manifest = read_manifest(source) or {}
    name = subset_name(num_samples)
    folder = root / name
    with prepared(root, subset_params(num_samples, manifest), marker=f"{name}.done") as prep:
        if prep.done and (folder / STATS).is_file():
            print(f"already prepared: {num_samples} PCQM4Mv2 molecules in {folder}", flush=True)
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        start = time.perf_counter()
        db = MoleculeDB(folder)
        gathered = GraphStats()
        pending: list[Any] = []
        for data in graphs(source, num_samples):
            gathered.add(data)
            pending.append(data)
            if len(pending) == WRITE_BATCH:
                db.extend(pending)
                pending = []
                if len(gathered.ys) % PROGRESS == 0:
                    print(f"{len(gathered.ys)} of {num_samples} molecules", flush=True)
        if pending:
            db.extend(pending)
        db.close()
        count = len(gathered.ys)
        if not count:
            raise SystemExit(f"{source}: no molecule of PCQM4Mv2 could be read")
        check_train_order(source, count)
        stats = {**gathered.result(), "source": INPUT, "revision": manifest.get("revision")}
        (folder / STATS).write_text(json.dumps(stats, indent=1) + "\n")
        elapsed = time.perf_counter() - start
        prep.info["seconds"] = round(elapsed, 3)
        print(
            f"built {count} PCQM4Mv2 molecules with their DFT conformers "
            f"({stats['atoms'] / count:.2f} atoms and {stats['bonds'] / count:.2f} "
            f"bonds per molecule) in {folder} in {elapsed:.1f} s",
            flush=True,
        )
    return folder


def prepare(root: Path, num_samples: int, seed: int = 0) -> Path:
    """The stand-in data set folder under ``root``, generated unless already there."""
    name = dataset_name(num_samples)
    folder = root / name
    params = generation_params(num_samples, seed)
    with prepared(root, params, marker=f"{name}.done") as prep:
        if prep.done and (folder / STATS).is_file():
            print(f"already prepared: {num_samples} molecules in {folder}", flush=True)
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a half-written database: start again
        start = time.perf_counter()
        data = generate(num_samples, seed)
        rows = write_db(folder, data)
        mean, std = target_stats(data)
        atoms, bonds = data["pos"].size(0), data["edge_index"].size(1) // 2
        stats = {
            "molecules": rows,
            "atoms": atoms,
            "bonds": bonds,
            "y_mean": mean,
            "y_std": std,
            "in_degree_histogram": in_degree_histogram(data).tolist(),
        }
        (folder / STATS).write_text(json.dumps(stats, indent=1) + "\n")
        elapsed = time.perf_counter() - start
        prep.info["seconds"] = round(elapsed, 3)
        print(
            f"generated {rows} molecules ({atoms / rows:.2f} atoms and {bonds / rows:.2f} "
            f"bonds per molecule, closest atoms {check_distances(data):.2f} A) in {folder} "
            f"in {elapsed:.1f} s",
            flush=True,
        )
    return folder


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    root = Path(args.data or data_dir(FOLDER))
    entry = entry_name(args.model)
    if not wants_real_molecules(entry):
        prepare(root, args.num_samples)  # pna: the stand-in (docs/parity.md)
        return
    from benchshared.inputs import fetch

    source = fetch([INPUT], entry=entry).get(INPUT)
    reason = None if source is not None else f"input {INPUT} unavailable (said above)"
    if source is not None and not rdkit_available():
        reason = "RDKit is not installed in this environment (upstream's requirement)"
    if reason is None:
        try:
            prepare_real(root, args.num_samples, source)
        except InputError as exc:
            raise SystemExit(f"{entry}: {exc}") from None
        return
    print(
        f"{entry}: {reason}: preparing the STAND-IN molecules instead (generated, "
        "PCQM4Mv2-shaped); a run on them is not comparable with upstream milabench",
        flush=True,
    )
    prepare(root, args.num_samples)


def rdkit_available() -> bool:
    """True when RDKit imports (upstream's molecules need it; main.py does not)."""
    try:
        import rdkit  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
