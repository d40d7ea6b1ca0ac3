"""The Llama entry's prompts: wikitext-103's train lines, filtered as upstream does.

Upstream iterates ``load_dataset("wikitext", "wikitext-103-v1")["train"]`` in order and
keeps ``text.strip()`` unless it is empty, starts with ``" = "`` or has fewer than 10
characters (`is_prompt`; after the strip the title test never matches, so headings such
as ``"= Valkyria Chronicles III ="`` are prompts there too, and here). The hub serves
that split as parquet shards (``wikitext-103-v1/train-0000?-of-0000?.parquet`` of
``Salesforce/wikitext``), read here in name order, one record batch at a time, with
pyarrow: nothing is held but the batch being read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

#: The split upstream reads, and its shards' folder in the hub repository.
SPLIT = "train"
CONFIG_FOLDER = "wikitext-103-v1"


def is_prompt(text: str) -> bool:
    """Upstream's filter, applied to a stripped line."""
    return not (text == "" or text.startswith(" = ") or len(text) < 10)


def train_shards(folder: Path) -> list[Path]:
    """The train split's parquet shards of an input folder, in name order; a one-line
    error naming the folder when it holds none."""
    shards = sorted((folder / CONFIG_FOLDER).glob(f"{SPLIT}-*.parquet"))
    if not shards:
        raise SystemExit(
            f"llama: no {CONFIG_FOLDER}/{SPLIT}-*.parquet in {folder}: run milabench prepare again"
        )
    return shards


def read_lines(shards: list[Path], batch_rows: int = 4096) -> Iterator[str]:
    """Every ``text`` value of ``shards``, in order."""
    import pyarrow.parquet as pq

    for shard in shards:
        table = pq.ParquetFile(shard)
        for batch in table.iter_batches(batch_size=batch_rows, columns=["text"]):
            yield from batch.column(0).to_pylist()


class WikitextPrompts:
    """Re-iterable prompts of an input folder: each ``iter()`` starts again at the first
    line of the first shard (one pass is far more than a run reads)."""

    def __init__(self, folder: Path) -> None:
        self.shards = train_shards(folder)

    def __iter__(self) -> Iterator[str]:
        for line in read_lines(self.shards):
            text = (line or "").strip()
            if is_prompt(text):
                yield text
