"""Generate the synthetic molecules that ``pna`` and ``dimenet`` train on (idempotent).

Gets the same argv as main.py; only ``--data`` and ``--num-samples`` matter here (the data
does not follow the training ``--seed``). The file ``<data>/molecules-<num-samples>.pt`` is
written once; its marker ``molecules-<num-samples>.done`` records the generation
parameters, so a finished file is kept and other sizes live next to it (the smoke and
standard suites can share a base).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from molecules import check_distances, dataset_name, generate, generation_params, save

from benchkit.datasets import data_dir, prepared

FOLDER = "geo_gnn"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help=f"default: $MILABENCH_DIR_DATA/{FOLDER}")
    parser.add_argument("--num-samples", type=int, default=100_000)
    args, _unknown = parser.parse_known_args(argv)
    return args


def prepare(root: Path, num_samples: int, seed: int = 0) -> Path:
    """The data set file under ``root``, generated unless already there."""
    name = dataset_name(num_samples)
    path = root / name
    params = generation_params(num_samples, seed)
    with prepared(root, params, marker=name.replace(".pt", ".done")) as prep:
        if prep.done and path.exists():
            print(f"already prepared: {num_samples} molecules in {path}", flush=True)
            return path
        start = time.perf_counter()
        data = generate(num_samples, seed)
        save(data, path)
        elapsed = time.perf_counter() - start
        prep.info["seconds"] = round(elapsed, 3)
        print(
            f"generated {num_samples} molecules ({data['pos'].size(0)} atoms, "
            f"{data['edge_index'].size(1) // 2} bonds, closest atoms "
            f"{check_distances(data):.2f} A) in {path} in {elapsed:.1f} s",
            flush=True,
        )
    return path


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    prepare(Path(args.data or data_dir(FOLDER)), args.num_samples)


if __name__ == "__main__":
    main()
