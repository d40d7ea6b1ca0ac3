"""Generate the synthetic PCQM4Mv2-shaped molecules that ``pna`` and ``dimenet`` train on
(idempotent).

Gets the same argv as main.py; only ``--data`` and ``--num-samples`` matter here (the data
does not follow the training ``--seed``). The folder ``<data>/molecules-<num-samples>/``
holds the SQLite database (``processed/sqlite.db``, upstream's schema, see molecules.py)
and ``stats.json`` (target mean and standard deviation, in-degree histogram, atom and bond
counts): main.py reads the statistics there instead of scanning the database at start-up
as upstream does. Its marker ``molecules-<num-samples>.done`` records the generation
parameters, so a finished data set is kept and other sizes live next to it (the smoke
and standard suites can share a base).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from molecules import (
    check_distances,
    dataset_name,
    generate,
    generation_params,
    in_degree_histogram,
    target_stats,
    write_db,
)

from benchshared.datasets import data_dir, prepared

FOLDER = "geo_gnn"
STATS = "stats.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help=f"default: $MILABENCH_DIR_DATA/{FOLDER}")
    parser.add_argument("--num-samples", type=int, default=100_000)
    args, _unknown = parser.parse_known_args(argv)
    return args


def prepare(root: Path, num_samples: int, seed: int = 0) -> Path:
    """The data set folder under ``root``, generated unless already there."""
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
    prepare(Path(args.data or data_dir(FOLDER)), args.num_samples)


if __name__ == "__main__":
    main()
