"""Generate llava's synthetic (image, token sequence) pairs (idempotent).

What llava-1.5's processor would hand the model, built without its files (nothing can be
downloaded): RGB images at the vision tower's resolution (uint8, normalised on the device
by main.py) and token ids laid out like the chat template after the processor expanded
``<image>``: ``<s>`` + a few prompt tokens + one image placeholder per patch (576 at
336 px) + the rest of the text, ending with ``</s>``. Text ids are random below the image
token id.

Gets the same argv as main.py; only ``--size``, ``--text-len``, ``--samples``, ``--data``
and ``--seed`` matter here. Writes ``images.npy`` (N x H x W x 3, uint8) and
``input_ids.npy`` (N x tokens, int32) into ``$MILABENCH_DIR_DATA/llava-<size>``; a
finished folder (its ``done`` marker, same parameters) is kept.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from shapes import BOS, EOS, PREFIX_TOKENS, SIZES, Shape, data_folder, sequence_length

from benchkit.datasets import data_dir, prepared


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="7b")
    parser.add_argument("--text-len", type=int, default=128, help="text tokens per sample")
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--data", default=None, help="default: $MILABENCH_DIR_DATA/llava-<size>")
    parser.add_argument("--seed", type=int, default=0)
    args, _unknown = parser.parse_known_args(argv)
    if args.text_len < PREFIX_TOKENS + 2:
        parser.error(f"--text-len must be at least {PREFIX_TOKENS + 2}")
    return args


def make_images(shape: Shape, samples: int, rng) -> object:
    """Smooth random pictures (a coarse random grid scaled up, per-image tint): content
    like a photograph's rather than pure noise; the model does not care, a viewer might."""
    import numpy as np

    size = shape.image_size
    cells = max(2, size // 16)
    coarse = rng.integers(0, 256, (samples, cells, cells, 3), dtype=np.uint8)
    tint = rng.integers(0, 256, (samples, 1, 1, 3), dtype=np.uint16)
    scale = -(-size // cells)  # ceil
    big = coarse.repeat(scale, axis=1).repeat(scale, axis=2)[:, :size, :size]
    return ((big.astype(np.uint16) + tint) // 2).astype(np.uint8)


def make_input_ids(shape: Shape, samples: int, text_len: int, rng) -> object:
    """Token ids: ``<s>``, prompt tokens, image placeholders, text, ``</s>``."""
    import numpy as np

    length = sequence_length(shape, text_len)
    ids = rng.integers(3, shape.image_token, (samples, length), dtype=np.int32)
    ids[:, 0] = BOS
    ids[:, PREFIX_TOKENS : PREFIX_TOKENS + shape.image_tokens] = shape.image_token
    ids[:, -1] = EOS
    return ids


def prepare(args: argparse.Namespace) -> Path:
    """Write the data set unless the same one is already there; returns its folder."""
    import numpy as np

    shape = SIZES[args.size]
    root = Path(args.data or data_dir(data_folder(args.size)))
    params = {
        "kind": "llava",
        "size": args.size,
        "shape": shape.__dict__,
        "text_len": args.text_len,
        "samples": args.samples,
        "seed": args.seed,
    }
    with prepared(root, params) as prep:
        if prep.done:
            print(f"already prepared: {args.samples} llava samples in {root}", flush=True)
            return root
        start = time.perf_counter()
        rng = np.random.default_rng(args.seed)
        np.save(root / "images.npy", make_images(shape, args.samples, rng))
        np.save(root / "input_ids.npy", make_input_ids(shape, args.samples, args.text_len, rng))
        prep.info["seconds"] = round(time.perf_counter() - start, 3)
        print(
            f"generated {args.samples} llava samples ({shape.image_size} px images, "
            f"{sequence_length(shape, args.text_len)} tokens of which {shape.image_tokens} "
            f"image placeholders) in {root}",
            flush=True,
        )
    return root


def main(argv: list[str] | None = None) -> None:
    prepare(parse_args(argv))


if __name__ == "__main__":
    main()
