"""Fetch the LLM fine-tuning entries' real inputs and pre-tokenise them (idempotent).

Gets the same argv as main.py; only ``--dataset`` and ``--tokenizer`` (catalogue names)
matter here, and an entry without ``--dataset`` (the stand-in workloads) needs nothing.
`benchshared.inputs.fetch` brings both inputs (or prints, for each one it cannot, the
line that says why and what to do, and the entry then runs its stand-in); when both are
there, every sample is tokenised once (`alpaca.prepare_tokenised`) into
``$MILABENCH_DIR_DATA/llm/<dataset>--<tokenizer>/``, whose done-marker (written last)
names both inputs' revisions and file hashes: a finished set is kept, another revision
is tokenised again. Exits 0 either way.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchshared import inputs
from benchshared.datasets import entry_config


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=None)
    parser.add_argument("--tokenizer", default=None)
    args, _unknown = parser.parse_known_args(argv)
    return args


def prepare(dataset: str, tokenizer: str, entry: str) -> Path | None:
    """The pre-tokenised set's folder once both inputs are there, else None (fetch said
    why)."""
    inputs.fetch([dataset, tokenizer], entry=entry)
    data_folder, tokenizer_folder = inputs.locate(dataset), inputs.locate(tokenizer)
    if data_folder is None or tokenizer_folder is None:
        return None
    from alpaca import prepare_tokenised, tokenised_folder  # torch: only when there is work

    folder = tokenised_folder(inputs.inputs_root().parent, dataset, tokenizer)
    start = time.perf_counter()
    samples, made = prepare_tokenised(data_folder, tokenizer_folder, folder)
    what = "tokenised" if made else "already prepared:"
    print(
        f"{entry}: {what} {len(samples)} samples of {dataset} by {tokenizer} "
        f"({len(samples.tokens)} tokens) in {folder} ({time.perf_counter() - start:.1f} s)",
        flush=True,
    )
    return folder


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.dataset and args.tokenizer:
        prepare(args.dataset, args.tokenizer, str(entry_config().get("name") or "llm"))


if __name__ == "__main__":
    main()
