"""Prepare llava's inputs, upstream's when they can be fetched, else a synthetic
stand-in (idempotent either way).

``benchshared.inputs.fetch`` brings llava-hf/llava-1.5-7b-hf (upstream's revision) and
the_cauldron's aokvqa parquet files (one line per input it cannot get). With both, the
aokvqa rows (JPEG bytes and conversations, untouched) are copied once into one
memory-mappable Arrow file, ``$MILABENCH_DIR_DATA/llava-aokvqa/aokvqa-train.arrow`` (what
``load_dataset`` caches upstream); main.py processes them as upstream does. Without
them, the stand-in: RGB images at the tower's resolution and token ids laid out as the
chat template after ``<image>``'s expansion (``<s>``, prompt tokens, one placeholder per
patch, random text, ``</s>``, pads), text lengths uniform on ``--min-text-len`` to
``--text-len``, in ``$MILABENCH_DIR_DATA/llava-<size>`` (``images.npy``,
``input_ids.npy``, ``lengths.npy``); without ``--samples``, enough for every rank of the
node to read `batches_per_rank` batches (at least 128). Gets main.py's argv.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from shapes import (
    BOS,
    DATASET_INPUT,
    EOS,
    MODEL_INPUT,
    PREFIX_TOKENS,
    SIZES,
    Shape,
    data_folder,
    entry_name,
    real_data_file,
    sequence_length,
)

from benchshared.datasets import batches_per_rank, data_dir, entry_config, node_ranks, prepared

MIN_SAMPLES = 128
#: the marker of the Arrow copy (apart from the stand-in's ``done`` in a shared --data)
REAL_MARKER = "done-aokvqa"


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


def parquet_files(folder: Path) -> list[Path]:
    """The aokvqa parquet files of the input folder, in name order (the split's order)."""
    return sorted(folder.glob("aokvqa/*.parquet")) or sorted(folder.rglob("*.parquet"))


def prepare_real(dataset: Path, data: str | None = None) -> Path:
    """Copy the rows of the aokvqa parquet files in ``dataset`` into one Arrow IPC file
    (columns ``images``: list of {bytes, path}; ``texts``: list of {user, assistant,
    source}), once per set of source files; returns the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = real_data_file(data)
    files = parquet_files(dataset)
    if not files:
        raise SystemExit(f"llava: no parquet file in {dataset}: run prepare.py again")
    params = {
        "kind": "llava-aokvqa",
        "files": {str(f.relative_to(dataset)): f.stat().st_size for f in files},
    }
    with prepared(target.parent, params, marker=REAL_MARKER) as prep:
        if prep.done:
            print(f"already prepared: aokvqa rows in {target}", flush=True)
            return target
        start = time.perf_counter()
        schema = pq.read_schema(files[0]).remove_metadata()
        schema = pa.schema([schema.field("images"), schema.field("texts")])
        rows = 0
        tmp = target.with_name(target.name + ".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for path in files:
                for batch in pq.ParquetFile(path).iter_batches(1024, columns=schema.names):
                    writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))
                    rows += batch.num_rows
        tmp.replace(target)
        prep.info.update(rows=rows, seconds=round(time.perf_counter() - start, 3))
        print(f"copied {rows} aokvqa rows of {len(files)} parquet files to {target}", flush=True)
    return target


def main(argv: list[str] | None = None) -> None:
    """Fetch upstream's inputs; with both, the Arrow copy of aokvqa, else the stand-in."""
    args = parse_args(argv)
    from benchshared.inputs import fetch

    found = fetch([MODEL_INPUT, DATASET_INPUT], entry=entry_name())
    if found.get(MODEL_INPUT) and found.get(DATASET_INPUT):
        prepare_real(Path(found[DATASET_INPUT]), args.data)
    else:
        prepare(args)


if __name__ == "__main__":
    main()
