"""Fetch the LLM fine-tuning entries' real inputs and pre-tokenise them (idempotent).

Gets the same argv as main.py; only ``--dataset``, ``--tokenizer`` and ``--weights``
(catalogue names) matter here. Every input of the entry (`benchshared.catalogue.inputs_for`:
the Llama-3.1 weights, its tokenizer, the Alpaca data set), and those the options name,
is fetched by `benchshared.inputs.fetch`, which prints, for each one it cannot have, the
line that says why and what to do (main.py then runs random weights and/or random tokens
in its place). When the data set and the tokenizer are there, every sample is tokenised
once (`alpaca.prepare_tokenised`) into ``$MILABENCH_DIR_DATA/llm/<dataset>--<tokenizer>/``,
whose done-marker (written last) names both inputs' revisions and file hashes: a finished
set is kept, another revision is tokenised again. An entry with no input (the stand-in
workloads) fetches nothing. Exits 0 either way.
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
    parser.add_argument("--weights", default=None)
    args, _unknown = parser.parse_known_args(argv)
    return args


def entry_inputs(entry: str, args: argparse.Namespace) -> list[str]:
    """The inputs to fetch: the entry's (`inputs_for`), then those the options name
    that it does not list, each once."""
    from benchshared.catalogue import inputs_for

    names = list(inputs_for(entry))
    for name in (args.weights, args.tokenizer, args.dataset):
        if name and name not in names:
            names.append(name)
    return names


def prepare(dataset: str, tokenizer: str, entry: str) -> Path | None:
    """The pre-tokenised set's folder once both inputs are there, else None (fetch said
    why)."""
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
    entry = str(entry_config().get("name") or "llm")
    names = entry_inputs(entry, args)
    if names:
        inputs.fetch(names, entry=entry)
    if args.dataset and args.tokenizer:
        prepare(args.dataset, args.tokenizer, entry)


if __name__ == "__main__":
    main()
