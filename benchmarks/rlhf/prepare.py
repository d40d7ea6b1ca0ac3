"""Prepare rlhf's inputs: fetch upstream's, then tokenise its prompts once (idempotent).

``benchshared.inputs.fetch`` brings pythia-1b-deduped's tokenizer, pythia-160m's weights
and the descriptiveness split (one line per input it cannot get). With all three, the
split's ``prompt`` texts but the last 100 (upstream's evaluation rows) are tokenised by
upstream's tokenizer (``[PAD]`` added, no padding) into
``$MILABENCH_DIR_DATA/rlhf-descriptiveness/prompts.json`` with the pad and end-of-text
ids; a file made from the same sources is kept. Without them there is nothing to make:
main.py's stand-in draws random prompts itself. Gets main.py's argv (only ``--data``
matters here).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from prompts import (
    DATASET_INPUT,
    EVAL_SAMPLES,
    INPUTS,
    TOKENIZER_INPUT,
    entry_name,
    load_tokenizer,
    prompts_file,
    split_texts,
)

from benchshared.datasets import prepared
from benchshared.inputs import fetch, read_manifest


def tokenise(tokenizer_folder: Path, dataset: Path, data: str | None = None) -> Path:
    """Write the training prompts' token ids once per (tokenizer, data set) revision."""
    target = prompts_file(data)
    params = {
        "kind": "rlhf-descriptiveness",
        "eval_samples": EVAL_SAMPLES,
        "sources": {
            str(folder): (read_manifest(folder) or {}).get("files")
            for folder in (tokenizer_folder, dataset)
        },
    }
    with prepared(target.parent, params) as prep:
        if prep.done:
            print(f"already prepared: rlhf prompts in {target}", flush=True)
            return target
        start = time.perf_counter()
        tokenizer = load_tokenizer(tokenizer_folder)
        texts = split_texts(dataset)
        train = texts[: max(0, len(texts) - EVAL_SAMPLES)]
        if not train:
            raise SystemExit(f"rlhf: {len(texts)} prompts in {dataset}, all evaluation rows")
        ids = tokenizer(train, padding=False)["input_ids"]
        content = {"pad_id": tokenizer.pad_token_id, "eos_id": tokenizer.eos_token_id}
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps({**content, "prompts": ids}))
        tmp.replace(target)
        lengths = [len(x) for x in ids]
        prep.info.update(prompts=len(ids), seconds=round(time.perf_counter() - start, 3))
        print(
            f"tokenised {len(ids)} descriptiveness prompts ({min(lengths)}-{max(lengths)} "
            f"tokens, mean {sum(lengths) / len(lengths):.1f}) into {target}",
            flush=True,
        )
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="default: $MILABENCH_DIR_DATA/rlhf-...")
    args, _unknown = parser.parse_known_args(argv)
    found = fetch(list(INPUTS), entry=entry_name())
    if all(found.values()):
        tokenise(Path(found[TOKENIZER_INPUT]), Path(found[DATASET_INPUT]), args.data)


if __name__ == "__main__":
    main()
