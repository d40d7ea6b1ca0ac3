"""Generate the ImageNet-style JPEG folder of the torchvision entries (idempotent).

Gets the same argv as main.py; entries with ``--synthetic-data`` need nothing.
"""

from __future__ import annotations

import argparse
import os

from benchkit.datasets import make_image_folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--images-per-class", type=int, default=16)
    parser.add_argument("--source-size", type=int, default=256)
    parser.add_argument("--synthetic-data", action="store_true")
    args, _unknown = parser.parse_known_args(argv)
    if args.synthetic_data:
        print("torchvision: synthetic data, nothing to prepare", flush=True)
        return
    root = args.data or os.path.join(os.environ.get("MILABENCH_DIR_DATA", "data"), "FakeImageNet")
    make_image_folder(
        root, n_classes=args.classes, per_class=args.images_per_class, size=args.source_size
    )


if __name__ == "__main__":
    main()
