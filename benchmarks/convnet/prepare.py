"""Generate the JPEG folder that ``convnet`` trains on (idempotent).

Gets the same argv as main.py; only ``--data``, ``--image-size`` and ``--classes``
matter here. A finished folder (its ``done`` marker) is detected and kept.
"""

from __future__ import annotations

import argparse
import os

from benchkit.datasets import make_image_folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--images-per-class", type=int, default=128)
    parser.add_argument("--synthetic-data", action="store_true")
    args, _unknown = parser.parse_known_args(argv)
    if args.synthetic_data:
        print("convnet: synthetic data, nothing to prepare", flush=True)
        return
    root = args.data or os.path.join(os.environ.get("MILABENCH_DIR_DATA", "data"), "convnet-jpeg")
    make_image_folder(
        root, n_classes=args.classes, per_class=args.images_per_class, size=args.image_size
    )


if __name__ == "__main__":
    main()
