"""Upstream's rlhf inputs and prompts, shared by ``prepare.py`` and ``main.py``.

Upstream's entry (trl's experimental ``PPOTrainer`` with ``PPOConfig``'s defaults) reads
three inputs (`benchshared.catalogue`): the four models from ``EleutherAI/pythia-160m``
(trl's default ``sft_model_path`` and ``reward_model_path``), the tokenizer of
``EleutherAI/pythia-1b-deduped`` (``--model_name_or_path``: left padding, ``[PAD]`` added)
and the ``descriptiveness`` split of trl-internal-testing/descriptiveness-sentiment-trl-
style, whose last 100 rows are the evaluation set and the rest, their ``prompt`` column
tokenised without padding, the training prompts. A batch is left-padded to its longest
prompt with the pad id (``DataCollatorWithPadding``). ``prepare.py`` tokenises once and
writes `PROMPTS_FILE`; torch is imported only by what needs it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MODEL_INPUT = "pythia-160m"
TOKENIZER_INPUT = "pythia-1b-deduped"
DATASET_INPUT = "descriptiveness-sentiment"
INPUTS = (TOKENIZER_INPUT, MODEL_INPUT, DATASET_INPUT)
EVAL_SAMPLES = 100  # upstream's evaluation rows, taken from the end of the split
PROMPTS_FOLDER = "rlhf-descriptiveness"
PROMPTS_FILE = "prompts.json"
DEFAULT_ENTRY = "rlhf-single"


def real_inputs() -> dict[str, Path | None]:
    """Each upstream input's verified folder, or None when it was not prepared."""
    from benchshared.inputs import locate

    return {name: locate(name) for name in INPUTS}


def entry_name() -> str:
    """The entry this process runs for (``MILABENCH_CONFIG``'s name; by hand:
    ``rlhf-single``)."""
    from benchshared.datasets import entry_config

    name = entry_config().get("name")
    return name if isinstance(name, str) and name else DEFAULT_ENTRY


def prompts_file(data: str | None = None) -> Path:
    """The tokenised prompts (``--data`` overrides ``$MILABENCH_DIR_DATA/<folder>``)."""
    root = data or os.path.join(os.environ.get("MILABENCH_DIR_DATA", "data"), PROMPTS_FOLDER)
    return Path(root) / PROMPTS_FILE


def load_tokenizer(folder: Path) -> Any:
    """Upstream's tokenizer: left padding, ``[PAD]`` added as the pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    tokenizer.add_special_tokens({"pad_token": "[PAD]"})
    return tokenizer


def split_texts(dataset: Path) -> list[str]:
    """The ``prompt`` column of the split's parquet files, in file order."""
    import pyarrow.parquet as pq

    files = sorted(dataset.glob("data/descriptiveness-*.parquet"))
    if not files:
        raise SystemExit(f"rlhf: no descriptiveness parquet file in {dataset}: prepare again")
    return [
        text for f in files for text in pq.read_table(f, columns=["prompt"])["prompt"].to_pylist()
    ]


def read_prompts(path: Path) -> dict[str, Any]:
    """The prepared prompts: ``{"pad_id", "eos_id", "prompts": [[ids], ...]}``."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"rlhf: no prepared prompts in {path}: run prepare.py") from exc


class LeftPad:
    """``DataCollatorWithPadding`` with a left-padding tokenizer: a batch of prompts as one
    tensor, each row left-padded with the pad id to the batch's longest."""

    def __init__(self, pad: int) -> None:
        self.pad = pad

    def __call__(self, prompts: list[list[int]]) -> Any:
        import torch

        longest = max(len(p) for p in prompts)
        out = torch.full((len(prompts), longest), self.pad, dtype=torch.long)
        for row, ids in enumerate(prompts):
            out[row, longest - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        return out
