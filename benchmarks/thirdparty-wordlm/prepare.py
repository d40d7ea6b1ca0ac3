"""Write the synthetic text corpus that ``word_language_model.py`` trains on (idempotent).

Gets the same argv as the training script, so unknown options are ignored; only
``--data`` (the folder that receives ``train.txt``), ``--corpus-words`` and
``--corpus-vocab`` matter. The corpus is deterministic: made-up words drawn from a Zipf
distribution over a fixed vocabulary, in lines of 5 to 30 words. A ``train.txt.done``
marker holding the generation parameters and the file size is written last; when it
matches, nothing is done.

Standard library only: it runs before anything else is known to be importable.
"""

from __future__ import annotations

import argparse
import json
import os
import random

SEED = 20240611
ZIPF_EXPONENT = 1.1
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
SYLLABLES = [c + v for c in CONSONANTS for v in VOWELS]  # 70 syllables


def make_word(index: int) -> str:
    """A unique, pronounceable made-up word for every index (base-70 syllables)."""
    syllables = []
    index += len(SYLLABLES)  # every word has at least two syllables
    while index:
        index, digit = divmod(index, len(SYLLABLES))
        syllables.append(SYLLABLES[digit])
    return "".join(reversed(syllables))


def generate(words: int, vocab: int) -> str:
    rng = random.Random(SEED)
    vocabulary = [make_word(i) for i in range(vocab)]
    weights = [1.0 / (rank + 1) ** ZIPF_EXPONENT for rank in range(vocab)]
    cumulative = []
    total = 0.0
    for weight in weights:
        total += weight
        cumulative.append(total)
    drawn = rng.choices(vocabulary, cum_weights=cumulative, k=words)
    lines = []
    start = 0
    while start < words:
        length = rng.randint(5, 30)
        lines.append(" ".join(drawn[start : start + length]))
        start += length
    return "\n".join(lines) + "\n"


def read_marker(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="./data", help="folder that receives train.txt")
    parser.add_argument("--corpus-words", type=int, default=200_000)
    parser.add_argument("--corpus-vocab", type=int, default=2_000)
    args, _unknown = parser.parse_known_args(argv)

    os.makedirs(args.data, exist_ok=True)
    corpus = os.path.join(args.data, "train.txt")
    marker = corpus + ".done"
    params = {"words": args.corpus_words, "vocab": args.corpus_vocab, "seed": SEED}
    previous = read_marker(marker)
    if (
        previous is not None
        and previous.get("params") == params
        and os.path.isfile(corpus)
        and os.path.getsize(corpus) == previous.get("size")
    ):
        print(f"wordlm: {corpus} is ready", flush=True)
        return

    if os.path.exists(marker):
        os.remove(marker)
    write_atomically(corpus, generate(args.corpus_words, args.corpus_vocab))
    size = os.path.getsize(corpus)
    write_atomically(marker, json.dumps({"params": params, "size": size}) + "\n")
    print(f"wordlm: wrote {corpus} ({args.corpus_words} words, {size} bytes)", flush=True)


if __name__ == "__main__":
    main()
