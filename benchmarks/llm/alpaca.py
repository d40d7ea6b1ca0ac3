"""Upstream's fine-tuning batches: Alpaca samples as torchtune makes them for its recipes.

What upstream's LLM entries train on (torchtune ``alpaca_cleaned_dataset`` for the 8B
recipe, ``alpaca_dataset`` for the 70B ones; ``packed: False``, ``max_seq_len: null``,
``train_on_input`` left at True, ``shuffle: True``, the sampler's seed 0) is rebuilt here
from the same files with the Llama-3.1 tokenizer's ``tokenizer.json``:

* `AlpacaTokenizer`: one sample is ``<|begin_of_text|>``, the user turn (header
  ``<|start_header_id|>user<|end_header_id|>\\n\\n``, the Alpaca prompt, stripped,
  ``<|eot_id|>``), the assistant turn (the output, stripped), ``<|end_of_text|>``; special
  tokens written in the text are encoded as text.
* `Tokenised`: every sample's tokens and prompt length (the on-disk form prepare.py
  writes once, `save`/`load`); `Tokenised.sample` truncates and masks as torchtune.
* `SFTBatches`: a distributed sampler's order (``randperm`` seeded with seed + epoch,
  padded to a multiple of the ranks, every ``world``-th index), batches without the
  incomplete last one, padded to the longest sample of each batch (tokens with
  ``<|finetune_right_pad_id|>``, labels with -100).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchshared.datasets import is_prepared, prepared
from benchshared.inputs import MANIFEST, read_manifest

IGNORE = -100
"""Label of a position that takes no loss (torchtune's ``CROSS_ENTROPY_IGNORE_IDX``)."""

FORMAT = 1
"""Version of the on-disk form (part of the done-marker's parameters)."""

PROMPT_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides "
    "further context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
)
PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
)

SPECIAL = {
    "bos": "<|begin_of_text|>",
    "eos": "<|end_of_text|>",
    "pad": "<|finetune_right_pad_id|>",
    "start_header": "<|start_header_id|>",
    "end_header": "<|end_header_id|>",
    "eot": "<|eot_id|>",
}
"""The Llama-3 special tokens a sample uses, by role (ids read from tokenizer.json)."""


def alpaca_prompt(record: dict[str, Any]) -> str:
    """The user turn of an Alpaca record: the template with or without its input."""
    if record.get("input"):
        return PROMPT_INPUT.format(instruction=record["instruction"], input=record["input"])
    return PROMPT_NO_INPUT.format(instruction=record["instruction"])


def read_alpaca(folder: Path) -> list[dict[str, Any]]:
    """The records of an Alpaca input folder, in file order: JSON lists
    (``alpaca_data_cleaned.json``) or parquet files (``data/train-*.parquet``, read with
    pyarrow), sorted by path as ``datasets`` loads them; the files are those the
    folder's manifest lists (every file under it without one)."""
    manifest = read_manifest(folder)
    names = (
        sorted(manifest["files"])
        if manifest
        else sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    )
    found = [folder / n for n in names if n.endswith(".json") and n != MANIFEST]
    parquet = [folder / n for n in names if n.endswith(".parquet")]
    records: list[dict[str, Any]] = []
    for path in found:
        records.extend(json.loads(path.read_text(encoding="utf-8")))
    if parquet:
        import pyarrow.parquet as pq

        for path in parquet:
            table = pq.read_table(path, columns=["instruction", "input", "output"])
            records.extend(table.to_pylist())
    if not found and not parquet:
        raise FileNotFoundError(f"{folder}: no Alpaca JSON or parquet file")
    return records


class AlpacaTokenizer:
    """The Llama-3 tokenizer of ``tokenizer.json`` (a `tokenizers` fast tokenizer) used as
    torchtune's ``Llama3Tokenizer.tokenize_messages`` on an Alpaca record."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(path))
        # torchtune's tiktoken encoder takes "<|...|>" written in a text as plain text
        self.tokenizer.encode_special_tokens = True
        ids = {role: self.tokenizer.token_to_id(text) for role, text in SPECIAL.items()}
        lacking = [SPECIAL[role] for role, i in ids.items() if i is None]
        if lacking:
            raise ValueError(f"{path}: no special token {', '.join(lacking)}")
        self.ids: dict[str, int] = {role: int(i) for role, i in ids.items()}
        self.newlines = self.encode(["\n\n"])[0]

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without the post-processor's special tokens."""
        found = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [e.ids for e in found]

    def header(self, role: str) -> list[int]:
        return [
            self.ids["start_header"],
            *self.encode([role])[0],
            self.ids["end_header"],
            *self.newlines,
        ]

    def tokenise(self, records: Sequence[dict[str, Any]]) -> Tokenised:
        """Every record's tokens and prompt length (the tokens the user turn ends at)."""
        prompts = self.encode([alpaca_prompt(r).strip() for r in records])
        outputs = self.encode([str(r["output"]).strip() for r in records])
        user, assistant = self.header("user"), self.header("assistant")
        bos, eot, eos = self.ids["bos"], self.ids["eot"], self.ids["eos"]
        tokens, offsets, prompt_lens = array("i"), array("q", [0]), array("i")
        for prompt, output in zip(prompts, outputs, strict=True):
            head = [bos, *user, *prompt, eot]
            tokens.extend(head)
            tokens.extend([*assistant, *output, eot, eos])
            offsets.append(len(tokens))
            prompt_lens.append(len(head))
        return Tokenised(
            tokens=torch.tensor(tokens, dtype=torch.int32),
            offsets=torch.tensor(offsets, dtype=torch.int64),
            prompt=torch.tensor(prompt_lens, dtype=torch.int32),
            pad_id=self.ids["pad"],
            eos_id=eos,
        )


FILES = ("tokens.i32", "offsets.i64", "prompt.i32", "ids.json")


@dataclass
class Tokenised:
    """Tokenised samples: all tokens end to end (``tokens``), sample i in
    ``tokens[offsets[i]:offsets[i + 1]]``, its first ``prompt[i]`` tokens the
    begin-of-text and the user turn."""

    tokens: torch.Tensor
    offsets: torch.Tensor
    prompt: torch.Tensor
    pad_id: int
    eos_id: int

    def __len__(self) -> int:
        return len(self.prompt)

    def lengths(self, max_seq_len: int | None = None) -> torch.Tensor:
        """Each sample's length after truncation at ``max_seq_len`` (None: none)."""
        found = self.offsets[1:] - self.offsets[:-1]
        return found if not max_seq_len else found.clamp(max=max_seq_len)

    def sample(
        self, index: int, train_on_input: bool = True, max_seq_len: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens, labels) of sample ``index`` as torchtune's SFT transform makes them:
        truncated to ``max_seq_len`` with the last token made end-of-text; the mask
        covers the begin- and end-of-text and, unless ``train_on_input``, the user turn;
        labels are the next token where it is not masked, else -100 (last: -100)."""
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        tokens = self.tokens[start:end].long()
        n = len(tokens)
        mask = torch.zeros(n, dtype=torch.bool)
        mask[0] = True
        mask[-1] = True
        if not train_on_input:
            mask[: int(self.prompt[index])] = True
        if max_seq_len and n > max_seq_len:
            tokens, mask = tokens[:max_seq_len].clone(), mask[:max_seq_len].clone()
            tokens[-1] = self.eos_id
            mask[-1] = True
        labels = torch.full_like(tokens, IGNORE)
        labels[:-1] = torch.where(mask[1:], IGNORE, tokens[1:])
        return tokens, labels

    def save(self, folder: Path) -> None:
        """Write the on-disk form (raw little-endian arrays and the special ids)."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, t in zip(FILES, (self.tokens, self.offsets, self.prompt), strict=False):
            (folder / name).write_bytes(t.contiguous().numpy().tobytes())
        ids = {"pad_id": self.pad_id, "eos_id": self.eos_id, "samples": len(self)}
        (folder / FILES[3]).write_text(json.dumps(ids) + "\n")

    @classmethod
    def load(cls, folder: Path) -> Tokenised:
        """Read what `save` wrote."""

        def read(name: str, dtype: torch.dtype) -> torch.Tensor:
            raw = bytearray((folder / name).read_bytes())
            return torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)

        ids = json.loads((folder / FILES[3]).read_text())
        return cls(
            tokens=read(FILES[0], torch.int32),
            offsets=read(FILES[1], torch.int64),
            prompt=read(FILES[2], torch.int32),
            pad_id=int(ids["pad_id"]),
            eos_id=int(ids["eos_id"]),
        )


def tokenised_params(dataset: Path, tokenizer: Path) -> dict[str, Any]:
    """The done-marker's parameters of a pre-tokenised set: the format and both input
    folders' manifests (name, revision, each file's sha256), so that another revision
    of either makes prepare.py tokenise again and main.py not trust the old set."""

    def summary(folder: Path) -> dict[str, Any]:
        manifest = read_manifest(folder) or {}
        files = manifest.get("files") or {}
        return {
            "name": manifest.get("name"),
            "revision": manifest.get("revision"),
            "files": {k: v.get("sha256") for k, v in sorted(files.items())},
        }

    return {"format": FORMAT, "dataset": summary(dataset), "tokenizer": summary(tokenizer)}


def tokenise_inputs(dataset: Path, tokenizer: Path) -> Tokenised:
    """Every sample of the Alpaca folder ``dataset`` tokenised by the tokenizer folder's
    ``tokenizer.json``."""
    return AlpacaTokenizer(tokenizer / "tokenizer.json").tokenise(read_alpaca(dataset))


def prepare_tokenised(dataset: Path, tokenizer: Path, folder: Path) -> tuple[Tokenised, bool]:
    """The pre-tokenised set in ``folder``, written unless a finished one of the same
    inputs is there (its done-marker is written last); returns (set, made now)."""
    with prepared(folder, tokenised_params(dataset, tokenizer)) as prep:
        if prep.done:
            return Tokenised.load(folder), False
        data = tokenise_inputs(dataset, tokenizer)
        data.save(folder)
        prep.info.update(samples=len(data), tokens=len(data.tokens))
    return data, True


def load_tokenised(dataset: Path, tokenizer: Path, folder: Path) -> tuple[Tokenised, bool]:
    """The pre-tokenised set of these inputs when ``folder`` holds a finished one, else
    the samples tokenised now (nothing written: prepare.py writes); returns (set,
    read from disk)."""
    if is_prepared(folder, tokenised_params(dataset, tokenizer)):
        return Tokenised.load(folder), True
    return tokenise_inputs(dataset, tokenizer), False


def tokenised_folder(data_root: Path, dataset: str, tokenizer: str) -> Path:
    """Where prepare.py keeps the pre-tokenised set of ``dataset`` by ``tokenizer``."""
    return data_root / "llm" / f"{dataset}--{tokenizer}"


def sampler_order(n: int, rank: int, world: int, epoch: int, seed: int = 0) -> torch.Tensor:
    """The indices this rank reads in ``epoch``, as torch's ``DistributedSampler`` (and
    torchdata's stateful one) with ``shuffle=True``: a permutation seeded with ``seed +
    epoch``, padded with its own head to a multiple of ``world``, every ``world``-th from
    ``rank``."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    order = torch.randperm(n, generator=g)
    total = -(-n // world) * world
    if total > n:
        order = torch.cat([order, order[: total - n]])
    return order[rank:total:world]


class SFTBatches:
    """Batches of upstream's data loader, one epoch per ``iter()``: ``(tokens, labels)``
    of ``batch_size`` samples in this rank's sampler order, padded to the longest of the
    batch; the incomplete last batch dropped (``drop_last=True``)."""

    def __init__(
        self,
        data: Tokenised,
        batch_size: int,
        rank: int = 0,
        world: int = 1,
        train_on_input: bool = True,
        max_seq_len: int | None = None,
        seed: int = 0,
    ) -> None:
        self.data = data
        self.batch_size = batch_size
        self.rank, self.world, self.seed = rank, world, seed
        self.train_on_input = train_on_input
        self.max_seq_len = max_seq_len
        self.epoch = 0
        if len(self.batches(0)) == 0:
            raise ValueError(f"{len(data)} samples make no batch of {batch_size} on {world} ranks")

    def batches(self, epoch: int) -> torch.Tensor:
        """The sample indices of every batch of ``epoch``: ``[batches, batch_size]``."""
        order = sampler_order(len(self.data), self.rank, self.world, epoch, self.seed)
        count = len(order) // self.batch_size
        return order[: count * self.batch_size].view(count, self.batch_size)

    def padded_lengths(self, epoch: int = 0) -> torch.Tensor:
        """The padded length of every batch of ``epoch`` (the longest of its samples)."""
        lengths = self.data.lengths(self.max_seq_len)
        return lengths[self.batches(epoch)].amax(dim=1)

    def collate(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """torchtune's ``padded_collate_sft``: ``[batch, longest]`` tokens and labels."""
        pairs = [self.data.sample(int(i), self.train_on_input, self.max_seq_len) for i in indices]
        longest = max(len(t) for t, _ in pairs)
        tokens = torch.full((len(pairs), longest), self.data.pad_id, dtype=torch.long)
        labels = torch.full((len(pairs), longest), IGNORE, dtype=torch.long)
        for row, (t, lab) in enumerate(pairs):
            tokens[row, : len(t)] = t
            labels[row, : len(lab)] = lab
        return tokens, labels

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch = self.epoch
        self.epoch += 1
        for indices in self.batches(epoch).tolist():
            yield self.collate(indices)

    def __len__(self) -> int:
        return len(self.batches(0))
