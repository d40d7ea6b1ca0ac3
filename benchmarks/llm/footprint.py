"""Memory of an LLM entry per GPU and per node: `main.footprint` (the model is built on
the meta device there, and the run itself starts from the same build)."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, sibling_main


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options) on ``world`` ranks."""
    return sibling_main(__file__).footprint(args, world, ranks_per_node)
