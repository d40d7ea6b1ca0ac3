"""Generate the ImageNet-style JPEG folder of the dinov2 entries (idempotent).

Gets the same argv as main.py; entries with ``--synthetic-data`` need nothing.
"""

from __future__ import annotations

from benchshared.datasets import prepare_fake_imagenet

if __name__ == "__main__":
    prepare_fake_imagenet(None, "dinov2")
