"""Fetch upstream's inputs of the Llama entry: the Llama-2-7b-chat weights, upstream's
tokenizer and wikitext-103 (`main.INPUTS`, from `benchshared.catalogue`).

Gets the same argv as main.py and fetches the inputs at any ``--size``: main.py runs
upstream's work whenever all three are there (``--size`` shapes only its stand-in). A
suite that must download nothing sets ``HF_HUB_OFFLINE=1`` (the smoke suite does).
`benchshared.inputs.fetch` verifies what it fetches and, for an input it cannot have (no
network, no licence accepted, no ``HF_TOKEN`` for the gated weights, offline), prints one
line with the cause and the fix; main.py then runs its stand-in, marked not comparable.
Always exits 0: a missing input is the run's to report, not the prepare step's failure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ENTRY = "llama"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="7b", help="the stand-in's shape (fetched at any)")
    args, _unknown = parser.parse_known_args(argv)
    return args


def prepare(args: argparse.Namespace) -> dict[str, Path | None]:
    """Fetch the entry's inputs; returns each input's folder or None (fetch said why)."""
    from benchshared.catalogue import inputs_for
    from benchshared.inputs import fetch

    return dict(fetch(list(inputs_for(ENTRY)), entry=ENTRY))


def main(argv: list[str] | None = None) -> None:
    prepare(parse_args(argv))


if __name__ == "__main__":
    main()
