"""Generate the JPEG folder that ``convnet`` trains on (idempotent).

Gets the same argv as main.py; only ``--data``, ``--image-size`` and ``--classes``
matter here. A finished folder (its ``done`` marker) is detected and kept.
"""

from __future__ import annotations

from benchshared.datasets import prepare_image_folder


def main(argv: list[str] | None = None) -> None:
    prepare_image_folder(
        argv,
        bench="convnet",
        description=__doc__.splitlines()[0],
        folder="convnet-jpeg",
        classes=10,
        per_class=128,
        size_option="--image-size",
        size=64,
    )


if __name__ == "__main__":
    main()
