"""Model shapes, the synthetic sample layout and the names of upstream's inputs, shared
by ``prepare.py``, ``main.py`` and ``footprint.py``.

Standard library only: ``prepare.py`` needs the image size and the token layout, not
torch. ``7b`` is llava-hf/llava-1.5-7b-hf's configuration (CLIP ViT-L/14 at 336 px, a
two-layer GELU projector, Vicuna-7B = Llama-2-7B shape, vocabulary 32064 with the image
token 32000 and the pad token 32001). `MODEL_INPUT` and `DATASET_INPUT` name upstream's
inputs in `benchshared.catalogue`; `real_inputs` says where they are (None: not prepared).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    """One model shape: the vision tower, the text model and the special token ids."""

    # vision tower (CLIP ViT)
    v_hidden: int
    v_layers: int
    v_heads: int
    v_intermediate: int
    image_size: int
    patch_size: int
    # text model (Llama)
    t_hidden: int
    t_layers: int
    t_heads: int
    t_kv_heads: int
    t_intermediate: int
    vocab: int
    max_positions: int
    # special tokens: ids below ``image_token`` are ordinary text
    image_token: int
    pad_token: int

    @property
    def image_tokens(self) -> int:
        """Placeholders per image: one per patch (the ``default`` feature strategy drops
        the CLS position), 576 for a 336 px image in 14 px patches."""
        return (self.image_size // self.patch_size) ** 2


SIZES = {
    "tiny": Shape(64, 2, 2, 256, 32, 8, 64, 2, 2, 2, 172, 512, 2048, 510, 511),
    "7b": Shape(1024, 24, 16, 4096, 336, 14, 4096, 32, 32, 32, 11008, 32064, 4096, 32000, 32001),
}

BOS, EOS = 1, 2
#: Text tokens before the image placeholders ("<s> USER:"-like), then the image, then
#: the rest of the text ("\n<question> ASSISTANT: <answer></s>"-like): the layout of
#: llava-1.5's chat template after the processor expanded ``<image>``.
PREFIX_TOKENS = 4


def sequence_length(shape: Shape, text_len: int) -> int:
    """Tokens per sample: the text tokens plus the image placeholders."""
    return text_len + shape.image_tokens


def data_folder(size: str) -> str:
    """Folder name of a size's data set under ``$MILABENCH_DIR_DATA`` (one per size, so
    that the tiny and the real shapes never regenerate each other's files)."""
    return f"llava-{size}"


#: upstream's inputs (`benchshared.catalogue`): llava-hf/llava-1.5-7b-hf at upstream's
#: revision (weights, tokenizer, processor) and the_cauldron's aokvqa subset (parquet).
MODEL_INPUT = "llava-1.5-7b"
DATASET_INPUT = "the-cauldron-aokvqa"
#: Folder (under ``$MILABENCH_DIR_DATA``) of the aokvqa rows that ``prepare.py`` copies
#: into one memory-mappable Arrow file (what ``datasets.load_dataset`` caches upstream).
REAL_FOLDER = "llava-aokvqa"
REAL_FILE = "aokvqa-train.arrow"
DEFAULT_ENTRY = "llava-single"


def real_inputs() -> dict[str, Path | None]:
    """Each upstream input's verified folder, or None when it was not prepared."""
    from benchshared.inputs import locate

    return {name: locate(name) for name in (MODEL_INPUT, DATASET_INPUT)}


def real_data_file(data: str | None = None) -> Path:
    """The prepared Arrow file of aokvqa's rows (``--data`` overrides the folder)."""
    folder = data or os.path.join(os.environ.get("MILABENCH_DIR_DATA", "data"), REAL_FOLDER)
    return Path(folder) / REAL_FILE


def entry_name() -> str:
    """The entry this process runs for (``MILABENCH_CONFIG``'s name; by hand:
    ``llava-single``), named in the ``inputs`` record and fetch's messages."""
    from benchshared.datasets import entry_config

    name = entry_config().get("name")
    return name if isinstance(name, str) and name else DEFAULT_ENTRY
