"""Generate the ImageNet-style JPEG folder of the dinov2 entries (idempotent).

Gets the same argv as main.py; entries with ``--synthetic-data`` need nothing.
"""

from __future__ import annotations

from benchkit.datasets import prepare_image_folder


def main(argv: list[str] | None = None) -> None:
    prepare_image_folder(
        argv,
        bench="dinov2",
        description=__doc__.splitlines()[0],
        folder="FakeImageNet",
        classes=1000,
        per_class=16,
        size_option="--source-size",
        size=256,
    )


if __name__ == "__main__":
    main()
