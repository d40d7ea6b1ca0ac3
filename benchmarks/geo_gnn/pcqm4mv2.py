"""Upstream's molecules: the first molecules of PCQM4Mv2 with their DFT conformers, turned
into graphs as upstream's ``PCQM4Mv2Subset.process`` turns them.

The input `INPUT` (``benchshared.catalogue``) holds OGB's two files: the data set's zip
(``pcqm4m-v2/raw/data.csv.gz``: index, SMILES and HOMO-LUMO gap per molecule;
``pcqm4m-v2/split_dict.pt``: the split indices) and the archive of the training
molecules' 3D structures (``pcqm4m-v2-train.sdf`` in a ``.tar.gz``, the i-th record being
training molecule i). The folder may hold the archives or their extracted files; archives
are read as streams, never unpacked (the SDF is several GB).

Per molecule, as upstream: the SDF record read by RDKit (hydrogens removed, sanitised; a
record RDKit cannot read is skipped), its graph from ``from_smiles(MolToSmiles(mol))``
(9 atom and 3 bond features, in the canonical SMILES's atom order), the gap from the
table's row of the same position as target, positions and atomic numbers from the
conformer (in the SDF's order); a graph whose atoms, positions and atomic numbers do not
agree is skipped. The first ``size`` molecules that pass are written, in order, to the
same SQLite database as the stand-in (`molecules.MoleculeDB`). RDKit is imported here
only: main.py never needs it.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

#: Catalogue name of the input (``benchshared.catalogue``).
INPUT = "pcqm4mv2"
TABLE = "data.csv.gz"
SPLIT = "split_dict.pt"
SDF = "pcqm4m-v2-train.sdf"
VERSION = 1


class InputError(Exception):
    """An input folder without the file upstream reads (one sentence for people)."""


def _find(folder: Path, name: str) -> Path | None:
    """The file called ``name`` anywhere under ``folder`` (shortest path first)."""
    found = sorted(folder.rglob(name), key=lambda p: (len(p.parts), str(p)))
    return found[0] if found else None


def _zip_member(folder: Path, name: str) -> tuple[zipfile.ZipFile, str] | None:
    """A zip under ``folder`` holding a member whose last path component is ``name``."""
    for archive in sorted(folder.rglob("*.zip")):
        handle = zipfile.ZipFile(archive)
        for member in handle.namelist():
            if member.rsplit("/", 1)[-1] == name:
                return handle, member
        handle.close()
    return None


def open_input_file(folder: Path, name: str) -> io.BufferedIOBase:
    """A binary stream of file ``name`` of an input: extracted, or a member of a zip."""
    path = _find(folder, name)
    if path is not None:
        return path.open("rb")
    hit = _zip_member(folder, name)
    if hit is None:
        raise InputError(f"{folder} holds neither {name} nor a zip with it")
    handle, member = hit
    return handle.open(member)


def table_rows(folder: Path) -> Iterator[tuple[str, float]]:
    """(SMILES, HOMO-LUMO gap) of every molecule of ``data.csv.gz``, in order (the gap
    is NaN where the table has none: the test molecules)."""
    with open_input_file(folder, TABLE) as raw, gzip.open(raw, "rt", newline="") as text:
        for row in csv.DictReader(text):
            gap = row.get("homolumogap") or ""
            yield row["smiles"], float(gap) if gap.strip() else math.nan


def train_indices(folder: Path) -> torch.Tensor:
    """The ``train`` indices of ``split_dict.pt`` (upstream's dataset order)."""
    with open_input_file(folder, SPLIT) as raw:
        split = torch.load(io.BytesIO(raw.read()), weights_only=False)
    return torch.as_tensor(split["train"]).long()


def conformers(folder: Path) -> Iterator[Any]:
    """RDKit molecules (or None where RDKit cannot read a record) of the training SDF,
    in order: from ``pcqm4m-v2-train.sdf``, or streamed out of a ``.tar.gz`` holding it."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    path = _find(folder, SDF)
    if path is not None:
        with path.open("rb") as stream:
            yield from Chem.ForwardSDMolSupplier(stream)
        return
    for archive in sorted(folder.rglob("*.tar.gz")):
        with tarfile.open(archive, "r|gz") as tar:
            for member in tar:
                if member.isfile() and member.name.rsplit("/", 1)[-1] == SDF:
                    stream = tar.extractfile(member)
                    assert stream is not None
                    yield from Chem.ForwardSDMolSupplier(stream)
                    return
    raise InputError(f"{folder} holds neither {SDF} nor a .tar.gz with it")


def molecule_graph(mol: Any, gap: float) -> Any | None:
    """Upstream's item for one conformer, or None where upstream skips the molecule:
    ``Data(x, edge_index, edge_attr, smiles, y, pos, z)``."""
    from rdkit import Chem
    from torch_geometric.utils import from_smiles

    if mol is None:
        return None
    try:
        data = from_smiles(Chem.MolToSmiles(mol))
        data.y = gap
        data.pos = torch.tensor(mol.GetConformer().GetPositions(), dtype=torch.float)
        data.z = torch.tensor([a.GetAtomicNum() for a in mol.GetAtoms()], dtype=torch.long)
    except Exception:  # noqa: BLE001 - upstream skips any molecule it cannot convert
        return None
    atoms = data.x.shape[0] if data.x is not None else 0
    if atoms == 0 or data.edge_index is None:
        return None
    if data.pos.shape[0] != atoms or data.z.shape[0] != atoms:
        return None
    return data


def graphs(folder: Path, size: int) -> Iterator[Any]:
    """The first ``size`` molecules upstream keeps, as graphs (see the module docstring)."""
    kept = 0
    for (_smiles, gap), mol in zip(table_rows(folder), conformers(folder), strict=False):
        if kept >= size:
            return
        data = molecule_graph(mol, gap)
        if data is not None:
            kept += 1
            yield data


def check_train_order(folder: Path, count: int) -> None:
    """Upstream reads its rows through the ``train`` split; the SDF holds the training
    molecules in that order, so the split must start with ``0 .. count-1`` (OGB's does)."""
    train = train_indices(folder)
    if train.numel() < count or not torch.equal(train[:count], torch.arange(count)):
        raise InputError(
            f"{folder}: the train split does not start with molecules 0..{count - 1}; "
            "the conformers would not line up with upstream's order"
        )


def subset_name(num_samples: int) -> str:
    """Folder of a subset of ``num_samples`` molecules (next to the stand-in's)."""
    return f"pcqm4mv2-{num_samples}"


def subset_params(size: int, manifest: dict[str, Any]) -> dict[str, Any]:
    """What the ``done`` marker of a subset records (the size and the input's files and
    their sha256): another value rebuilds it."""
    files = {rel: info.get("sha256") for rel, info in sorted(manifest.get("files", {}).items())}
    return {
        "kind": "geo_gnn-pcqm4mv2",
        "num_samples": size,
        "revision": manifest.get("revision"),
        "files": files,
        "version": VERSION,
    }
