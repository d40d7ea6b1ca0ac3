"""Fetch upstream's inputs of the Llama entry: the Llama-2-7b-chat weights, upstream's
tokenizer and wikitext-103 (`main.INPUTS`, from `benchshared.catalogue`).

Gets the same argv as main.py; only ``--size`` matters: the inputs are fetched for the
entry's own shape (``--size 7b``), never for a smaller stand-in (a smoke run downloads
nothing). `benchshared.inputs.fetch` verifies what it fetches and, for an input it cannot
have (no network, no licence accepted, no ``HF_TOKEN`` for the gated weights), prints one
line with the cause and the fix; main.py then runs its stand-in, marked not comparable.
Always exits 0: a missing input is the run's to report, not the prepare step's failure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ENTRY = "llama"
REAL_SIZE = "7b"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default=REAL_SIZE)
    args, _unknown = parser.parse_known_args(argv)
    return args


def prepare(args: argparse.Namespace) -> dict[str, Path | None]:
    """Fetch the entry's inputs (at ``--size 7b``); returns each input's folder or None
    (nothing fetched at another size)."""
    from benchshared.catalogue import inputs_for

    names = inputs_for(ENTRY)
    if args.size != REAL_SIZE:
        print(
            f"{ENTRY}: --size {args.size} runs the stand-in; upstream's inputs "
            f"({', '.join(names)}) are fetched for --size {REAL_SIZE} only",
            flush=True,
        )
        return dict.fromkeys(names)
    from benchshared.inputs import fetch

    return dict(fetch(list(names), entry=ENTRY))


def main(argv: list[str] | None = None) -> None:
    prepare(parse_args(argv))


if __name__ == "__main__":
    main()
