"""Memory of a torchvision entry per GPU and per node (`benchkit.memory`): the classifier
built on the meta device, one forward + backward of the configured batch measured there,
SGD with momentum (one state per weight), DDP's gradient buckets under torchrun
(`benchshared.vision.classifier_footprint`). The model is built on the host, then moved."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint
from benchshared.vision import classifier_footprint


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options) on ``world`` ranks."""
    return classifier_footprint(
        args, world, ranks_per_node, channels_last=getattr(args, "channels_last", False)
    )
