"""Generate llava's synthetic (image, token sequence) pairs (idempotent).

What llava-1.5's processor would hand the model, built without its files (nothing can be
downloaded): RGB images at the vision tower's resolution (uint8, normalised on the device
by main.py) and token ids laid out like the chat template after the processor expanded
``<image>``: ``<s>`` + a few prompt tokens + one image placeholder per patch (576 at
336 px) + the rest of the text, ending with ``</s>``. Text ids are random below the image
token id. Each sample has its own text length, drawn uniformly from ``--min-text-len`` to
``--text-len`` (upstream's samples are single aokvqa conversations of varying length;
without ``--min-text-len`` every sample has ``--text-len`` text tokens); shorter samples
are padded with the pad id, and ``lengths.npy`` holds every sample's token count.

Gets the same argv as main.py; only ``--size``, ``--text-len``, ``--samples``, ``--data``,
``--seed`` and ``--batch-size`` matter here. Without ``--samples`` the set holds enough
samples for every rank of the node to read `batches_per_rank` batches of ``--batch-size``
in one pass (`benchshared.datasets`: 1 x 160 x 8 GPUs = 1,280), at least 128; a different
count is a different set (generated again). Writes ``images.npy`` (N x H x W x 3, uint8)
and ``input_ids.npy`` (N x tokens, int32) into ``$MILABENCH_DIR_DATA/llava-<size>``; a
finished folder (its ``done`` marker, same parameters) is kept.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from shapes import BOS, EOS, PREFIX_TOKENS, SIZES, Shape, data_folder, sequence_length

from benchshared.datasets import batches_per_rank, data_dir, entry_config, node_ranks, prepared

MIN_SAMPLES = 128


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="7b")
    parser.add_argument("--text-len", type=int, default=128, help="text tokens per sample (most)")
    parser.add_argument(
        "--min-text-len", type=int, default=None, help="fewest text tokens (default: --text-len)"
    )
    parser.add_argument("--samples", type=int, default=None, help="default: scaled (above)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--data", default=None, help="default: $MILABENCH_DIR_DATA/llava-<size>")
    parser.add_argument("--seed", type=int, default=0)
    args, _unknown = parser.parse_known_args(argv)
    if args.min_text_len is None:
        args.min_text_len = args.text_len
    if not PREFIX_TOKENS + 2 <= args.min_text_len <= args.text_len:
        parser.error(f"need {PREFIX_TOKENS + 2} <= --min-text-len <= --text-len")
    if args.samples is None:
        entry = entry_config()
        batches = batches_per_rank(entry.get("measure"))
        args.samples = max(MIN_SAMPLES, args.batch_size * batches * node_ranks(entry=entry))
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


def text_lengths(samples: int, low: int, high: int, rng) -> object:
    """Text tokens of each sample, uniform on ``[low, high]``."""
    return rng.integers(low, high + 1, samples)


def make_input_ids(shape: Shape, samples: int, text_len: int, rng, lengths=None) -> object:
    """Token ids: ``<s>``, prompt tokens, image placeholders, text, ``</s>``, then pad ids
    up to the longest sample (``lengths``: text tokens per sample, default all
    ``text_len``)."""
    import numpy as np

    if lengths is None:
        lengths = np.full(samples, text_len)
    length = sequence_length(shape, int(max(lengths)))
    ids = rng.integers(3, shape.image_token, (samples, length), dtype=np.int32)
    ids[:, 0] = BOS
    ids[:, PREFIX_TOKENS : PREFIX_TOKENS + shape.image_tokens] = shape.image_token
    ends = np.asarray([sequence_length(shape, int(n)) for n in lengths])
    ids[np.arange(samples), ends - 1] = EOS
    ids[np.arange(length)[None, :] >= ends[:, None]] = shape.pad_token
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
        "min_text_len": args.min_text_len,
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
        lengths = text_lengths(args.samples, args.min_text_len, args.text_len, rng)
        ids = make_input_ids(shape, args.samples, args.text_len, rng, lengths)
        np.save(root / "input_ids.npy", ids)
        np.save(root / "lengths.npy", (lengths + shape.image_tokens).astype(np.int32))
        prep.info["seconds"] = round(time.perf_counter() - start, 3)
        print(
            f"generated {args.samples} llava samples ({shape.image_size} px images, "
            f"{args.min_text_len}-{args.text_len} text tokens, mean {lengths.mean():.1f}, "
            f"+ {shape.image_tokens} image placeholders) in {root}",
            flush=True,
        )
    return root


def main(argv: list[str] | None = None) -> None:
    prepare(parse_args(argv))


if __name__ == "__main__":
    main()
