"""dimenet on upstream's molecules: a tiny PCQM4Mv2 input in OGB's formats (the data set's
zip with ``data.csv.gz`` and ``split_dict.pt``; the SDF of conformers in a ``.tar.gz``)
built here, as ``benchshared.inputs`` leaves a fetched input (files plus manifest), is
turned by prepare.py into upstream's graphs and trained on by main.py, whose ``inputs``
record says comparable; without it, the stand-in runs and the record says not comparable.

Upstream turns molecules into graphs with RDKit, which geo_gnn's environment holds: the
real-input runs use this interpreter when it has RDKit, else the smoke run's ``pyg``
environment (`rdkit_python`). Without RDKit, prepare.py's loud fallback to the stand-in
is checked too.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import importlib.util
import io
import json
import math
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from dimenetbases import dimenet_cache
from needs import needs

from .conftest import BENCHMARKS, bench_env, run_with_pipe

torch = pytest.importorskip("torch")
needs("torch_geometric")

GEO = BENCHMARKS / "geo_gnn"
HAVE_RDKIT = importlib.util.find_spec("rdkit") is not None
STOP = 2
#: Training molecules of the tiny input (chains: written without RDKit too); the third's
#: record has a triple C-O bond, which RDKit's sanitisation rejects and upstream skips.
SMILES = ("CCO", "OCCN", "CCOC", "CCCCl", "NCCCO", "CCCCCF", "OCCOC")
BAD, BAD_BOND = 2, 1
GAPS = (7.1, 5.25, 6.5, 8.0, 4.75, 9.125, 7.5)
USE = 5  # --num-samples: the first 5 molecules upstream keeps


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def v2000(symbols: list[str], pos: list[tuple[float, float, float]], bonds) -> str:
    """One SDF record (a V2000 molfile and ``$$$$``); ``bonds``: (atom, atom, order)."""
    lines = ["", "  hand", "", f"{len(symbols):3d}{len(bonds):3d}  0  0  0  0  0  0  0  0999 V2000"]
    for sym, (x, y, z) in zip(symbols, pos, strict=True):
        lines.append(f"{x:10.4f}{y:10.4f}{z:10.4f} {sym:<3} 0  0  0  0  0  0  0  0  0  0  0  0")
    lines += [f"{a + 1:3d}{b + 1:3d}{order:3d}  0" for a, b, order in bonds]
    return "\n".join([*lines, "M  END", "$$$$", ""])


def sdf_text() -> str:
    """The SDF of `SMILES`: with RDKit, hydrogens and one embedded 3D conformer each (as
    OGB's); without, heavy-atom zigzag chains. Record `BAD` gets its broken bond."""
    records = []
    for i, smiles in enumerate(SMILES):
        bad = {BAD_BOND: 3} if i == BAD else {}
        if HAVE_RDKIT:
            from rdkit import Chem
            from rdkit.Chem import AllChem

            mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
            assert AllChem.EmbedMolecule(mol, randomSeed=7 + i) == 0
            if bad:
                mol.GetBondWithIdx(BAD_BOND).SetBondType(Chem.BondType.TRIPLE)
            records.append(Chem.MolToMolBlock(mol, kekulize=False) + "$$$$\n")
        else:
            symbols = re.findall(r"Cl|Br|[BCNOSPFI]", smiles)
            pos = [(1.25 * k, 0.75 * (k % 2), 0.1 * k) for k in range(len(symbols))]
            bonds = [(k, k + 1, bad.get(k, 1)) for k in range(len(symbols) - 1)]
            records.append(v2000(symbols, pos, bonds))
    return "".join(records)


def make_input(inputs: Path) -> Path:
    """``<inputs>/pcqm4mv2``: OGB's zip and the conformers' tar.gz, then the manifest."""
    folder = inputs / "pcqm4mv2"
    folder.mkdir(parents=True)
    table = io.StringIO()
    rows = csv.writer(table, lineterminator="\n")
    rows.writerow(["idx", "smiles", "homolumogap"])
    for i, (smiles, gap) in enumerate(zip(SMILES, GAPS, strict=True)):
        rows.writerow([i, smiles, gap])
    rows.writerow([len(SMILES), "CCN", ""])  # a validation molecule: no gap, no conformer
    split = {
        "train": torch.arange(len(SMILES)),
        "valid": torch.tensor([len(SMILES)]),
        "test-dev": torch.tensor([], dtype=torch.long),
        "test-challenge": torch.tensor([], dtype=torch.long),
    }
    buffer = io.BytesIO()
    torch.save(split, buffer)
    with zipfile.ZipFile(folder / "pcqm4m-v2.zip", "w") as archive:
        archive.writestr("pcqm4m-v2/raw/data.csv.gz", gzip.compress(table.getvalue().encode()))
        archive.writestr("pcqm4m-v2/split_dict.pt", buffer.getvalue())
    sdf = sdf_text().encode()
    with tarfile.open(folder / "pcqm4m-v2-train.sdf.tar.gz", "w:gz") as archive:
        info = tarfile.TarInfo("pcqm4m-v2-train.sdf")
        info.size = len(sdf)
        archive.addfile(info, io.BytesIO(sdf))
    files = {
        p.name: {"sha256": sha256(p), "size": p.stat().st_size} for p in sorted(folder.iterdir())
    }
    manifest = {"name": "pcqm4mv2", "source": "test", "revision": "v2", "files": files}
    (folder / "milabench-input.json").write_text(json.dumps(manifest))
    return folder


def env_for(base: Path, entry: str, **extra: str) -> dict[str, str]:
    return bench_env(
        stop=STOP,
        skip=1,
        MILABENCH_DIR_DATA=str(base / "data"),
        MILABENCH_CONFIG=json.dumps({"name": entry}),
        **extra,
    )


def prepare(
    base: Path, entry: str, model: str, samples: int = USE, python: str = sys.executable, **extra
):
    argv = [python, "prepare.py", "--data", str(base / "geo"), "--model", model]
    argv += ["--num-samples", str(samples)]
    return run_with_pipe(argv, env_for(base, entry, **extra), GEO, timeout=300)


def train(base: Path, entry: str, samples: int = USE, python: str = sys.executable, **extra):
    argv = [python, "main.py", "--model", "DimeNet", "--use3d", "--data", str(base / "geo")]
    argv += ["--num-samples", str(samples), "--batch-size", "2", "--hidden", "8", "--layers", "1"]
    argv += ["--device", "cpu", "--threads", "1"]
    return run_with_pipe(argv, env_for(base, entry, **extra), GEO, timeout=300)


def geo_module(name: str):
    """One geo_gnn module, loaded by path under a name that cannot collide."""
    spec = importlib.util.spec_from_file_location(f"geo_{name}_pcqm", GEO / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs_records(run) -> list[dict]:
    return [r["inputs"] for r in run.records if r.get("task") == "inputs"]


@pytest.fixture(scope="module")
def real_base(tmp_path_factory) -> Path:
    """A base whose ``data/inputs/pcqm4mv2`` is the tiny input (as fetched)."""
    base = tmp_path_factory.mktemp("pcqm4mv2")
    make_input(base / "data" / "inputs")
    return base


@pytest.fixture(scope="module")
def rdkit_python(request) -> str:
    """An interpreter with RDKit and torch_geometric: this one, else the smoke run's
    ``pyg`` environment (geo_gnn's requirements name rdkit)."""
    if HAVE_RDKIT:
        return sys.executable
    python = request.getfixturevalue("smoke").base / "venv" / "pyg" / "bin" / "python"
    assert python.is_file(), f"{python}: the smoke run has no pyg environment"
    return str(python)


#: What upstream's ``PCQM4Mv2Subset.process`` makes of each SDF record (run by
#: `rdkit_python`): the graph of the canonical SMILES, or None for a record RDKit rejects.
UPSTREAM_ITEMS = """
import json, sys
from rdkit import Chem
from torch_geometric.utils import from_smiles
out = []
for mol in Chem.ForwardSDMolSupplier(open(sys.argv[1], "rb")):
    if mol is None:
        out.append(None)
        continue
    data = from_smiles(Chem.MolToSmiles(mol))
    out.append({"smiles": data.smiles, "x": data.x.tolist(),
                "edge_index": data.edge_index.tolist(), "edge_attr": data.edge_attr.tolist()})
print(json.dumps(out))
"""


def heavy_atoms(record: str) -> tuple[list[int], list[list[float]]]:
    """Atomic numbers and positions of a V2000 record's atoms other than hydrogen."""
    numbers = {"C": 6, "N": 7, "O": 8, "F": 9, "S": 16, "Cl": 17}
    lines = record.splitlines()
    count = int(lines[3][:3])
    z, pos = [], []
    for line in lines[4 : 4 + count]:
        symbol = line[31:34].strip()
        if symbol != "H":
            z.append(numbers[symbol])
            pos.append([float(line[0:10]), float(line[10:20]), float(line[20:30])])
    return z, pos


def test_table_and_split_are_read_from_ogbs_zip(real_base):
    """data.csv.gz and split_dict.pt are read out of the zip, never unpacked."""
    pcqm = geo_module("pcqm4mv2")
    folder = real_base / "data" / "inputs" / "pcqm4mv2"
    rows = list(pcqm.table_rows(folder))
    assert [s for s, _ in rows] == [*SMILES, "CCN"]
    assert [g for _, g in rows[:-1]] == list(GAPS) and math.isnan(rows[-1][1])
    assert torch.equal(pcqm.train_indices(folder), torch.arange(len(SMILES)))
    pcqm.check_train_order(folder, len(SMILES))
    with pytest.raises(pcqm.InputError, match="train split"):
        pcqm.check_train_order(folder, len(SMILES) + 1)
    assert not any(p.suffix in (".csv", ".gz", ".pt", ".sdf") for p in folder.iterdir()
                   if p.name != "pcqm4m-v2-train.sdf.tar.gz")  # fmt: skip


def test_prepare_builds_upstreams_graphs_from_the_conformers(real_base, rdkit_python):
    """The first 5 molecules upstream keeps (the broken record skipped): graph of the
    canonical SMILES (from_smiles), positions and atomic numbers of the SDF's heavy
    atoms, the table's gap; statistics as upstream's; a second prepare keeps them."""
    first = prepare(real_base, "dimenet", "DimeNet", python=rdkit_python)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "built 5 PCQM4Mv2 molecules" in first.stdout and "STAND-IN" not in first.stdout
    again = prepare(real_base, "dimenet", "DimeNet", python=rdkit_python)
    assert again.returncode == 0 and "already prepared: 5 PCQM4Mv2" in again.stdout

    text = sdf_text()
    sdf = real_base / "records.sdf"
    sdf.write_text(text)
    oracle = subprocess.run([rdkit_python, "-c", UPSTREAM_ITEMS, str(sdf)], capture_output=True,
                            text=True, timeout=120, check=True)  # fmt: skip
    want = json.loads(oracle.stdout)
    assert want[BAD] is None and all(w is not None for i, w in enumerate(want) if i != BAD)
    records = text.split("$$$$\n")
    folder = real_base / "geo" / f"pcqm4mv2-{USE}"
    db = geo_module("molecules").MoleculeDB(folder)
    kept = [i for i in range(len(SMILES)) if i != BAD][:USE]
    assert len(db) == USE
    for row, i in enumerate(kept):
        item = db[row]
        assert item.smiles == want[i]["smiles"] and item.y == GAPS[i]
        for key in ("x", "edge_index", "edge_attr"):
            assert item[key].tolist() == want[i][key], key
        z, pos = heavy_atoms(records[i])  # hydrogens removed, as RDKit's supplier does
        assert item.z.tolist() == z and torch.allclose(item.pos, torch.tensor(pos), atol=1e-4)
    db.close()
    stats = json.loads((folder / "stats.json").read_text())
    gaps = [GAPS[i] for i in kept]
    mean = sum(gaps) / len(gaps)
    assert stats["y_mean"] == pytest.approx(mean)
    assert stats["y_std"] == pytest.approx(math.sqrt(sum((g - mean) ** 2 for g in gaps) / 5))
    assert stats["molecules"] == USE and sum(stats["in_degree_histogram"]) == stats["atoms"]
    assert stats["source"] == "pcqm4mv2" and stats["revision"] == "v2"


def test_dimenet_trains_on_upstreams_molecules_comparable(
    real_base, rdkit_python, tmp_path_factory
):
    """main.py finds the prepared subset, says so, and its inputs record is comparable.
    (main.py itself needs no RDKit: it runs in this interpreter.)"""
    assert prepare(real_base, "dimenet", "DimeNet", python=rdkit_python).returncode == 0
    cache = str(dimenet_cache(tmp_path_factory))
    run = train(real_base, "dimenet", XDG_CACHE_HOME=cache)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "PCQM4Mv2's molecules" in run.stdout and "not comparable" not in run.stdout
    assert len(run.rates()) == STOP and all(r["units"] == "graphs/s" for r in run.rates())
    (record,) = inputs_records(run)
    assert record == {"entry": "dimenet", "comparable": True, "real": {"pcqm4mv2": "v2"},
                      "missing": []}  # fmt: skip
    # the input removed: the subset is not taken for upstream's any more
    manifest = real_base / "data" / "inputs" / "pcqm4mv2" / "milabench-input.json"
    saved = manifest.read_text()
    manifest.unlink()
    try:
        gone = train(real_base, "dimenet", XDG_CACHE_HOME=cache)
        assert gone.returncode != 0 and "prepare.py" in gone.stderr
    finally:
        manifest.write_text(saved)


def test_prepare_needs_rdkit_for_upstreams_molecules(tmp_path):
    """The input there, 20 molecules asked: with RDKit, the 6 it holds (fewer than asked:
    upstream writes what it has); without RDKit in the environment, the stand-in, said
    loudly (this interpreter decides which branch runs)."""
    make_input(tmp_path / "data" / "inputs")
    run = prepare(tmp_path, "dimenet", "DimeNet", samples=20)
    assert run.returncode == 0, run.stderr[-3000:]
    if HAVE_RDKIT:
        assert "built 6 PCQM4Mv2 molecules" in run.stdout and "STAND-IN" not in run.stdout
        assert (tmp_path / "geo" / "pcqm4mv2-20.done").is_file()
    else:
        assert "RDKit is not installed" in run.stdout and "STAND-IN" in run.stdout
        assert (tmp_path / "geo" / "molecules-20.done").is_file()
        assert not (tmp_path / "geo" / "pcqm4mv2-20").exists()
