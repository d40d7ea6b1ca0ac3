"""Synthetic datasets for benchmarks' ``prepare.py``, generated once and then kept.

Benchmarks must not depend on the network, so prepare steps generate data of the right
shape instead of downloading it: an ImageNet-style folder of random JPEG images (one
sub-folder per class) and flat files of random token ids. Preparing is idempotent: a
``done`` marker holding the generation parameters is written *last* (atomically), so an
interrupted generation is redone and a finished one is detected in microseconds; asking
for different parameters regenerates.

Standard library only; Pillow is imported lazily by `make_image_folder` (the benchmark's
own environment has it) and numpy, when importable, only speeds up `make_token_file`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER = "done"


@dataclass
class Preparation:
    """State of one dataset folder inside a `prepared` block.

    ``done`` is True when a previous call finished with the same parameters: the block
    should then do nothing. ``root`` is created on entry.
    """

    root: Path
    marker: Path
    params: dict[str, Any]
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


def read_marker(marker: Path) -> dict[str, Any] | None:
    """The JSON content of a ``done`` marker, or None when absent or unreadable."""
    try:
        return json.loads(Path(marker).read_text())
    except (OSError, ValueError):
        return None


def is_prepared(
    root: str | os.PathLike, params: dict[str, Any] | None = None, *, marker: str = MARKER
) -> bool:
    """True when ``root`` holds a finished dataset generated with ``params``."""
    content = read_marker(Path(root) / marker)
    if content is None:
        return False
    return params is None or content.get("params") == _normalise(params)


def _normalise(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters as they read back from JSON (tuples become lists), for comparisons."""
    return json.loads(json.dumps(params, sort_keys=True, default=str))


def _write_marker(marker: Path, params: dict[str, Any], info: dict[str, Any]) -> None:
    """Write the marker atomically: a reader never sees a half-written one."""
    tmp = marker.with_name(marker.name + f".tmp{os.getpid()}")
    content = {"params": params, "created": time.time(), "generator": __name__, **info}
    tmp.write_text(json.dumps(content, sort_keys=True, default=str) + "\n")
    os.replace(tmp, marker)


@contextmanager
def prepared(
    root: str | os.PathLike, params: dict[str, Any] | None = None, *, marker: str = MARKER
) -> Iterator[Preparation]:
    """Generate a dataset at most once.

    ::

        with prepared(root, {"n": 10}) as prep:
            if not prep.done:
                generate(prep.root)

    When the block ends without an exception and the dataset was not already there, the
    marker is written last; an exception leaves no marker, so the next call starts again.
    A stale marker (other parameters) is removed on entry, before anything is rewritten.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    norm = _normalise(params or {})
    path = root / marker
    content = read_marker(path)
    done = content is not None and content.get("params") == norm
    if content is not None and not done:
        path.unlink(missing_ok=True)
    prep = Preparation(root=root, marker=path, params=norm, done=done)
    yield prep
    if not done:
        _write_marker(path, norm, prep.info)


def _say(message: str, verbose: bool) -> None:
    if verbose:
        print(message, file=sys.stdout, flush=True)


def class_name(index: int) -> str:
    """Folder name of class ``index`` (zero-padded so that sorting keeps the order)."""
    return f"c{index:04d}"


def make_image_folder(
    root: str | os.PathLike,
    n_classes: int = 10,
    per_class: int = 16,
    size: int = 64,
    seed: int = 0,
    *,
    quality: int = 85,
    verbose: bool = True,
) -> Path:
    """An ImageNet-style folder ``root/<class>/<i>.jpeg`` of random RGB JPEG images.

    Each image is a low-resolution random pattern scaled up to ``size`` x ``size`` with a
    per-class tint, so that JPEG decoding costs what it costs on photographs (smooth
    content) rather than on pure noise, and classes are not all alike. Deterministic for
    a given ``seed``. Returns ``root``; prints where the data is (or that it was already
    there).
    """
    if n_classes < 1 or per_class < 1 or size < 1:
        raise ValueError("n_classes, per_class and size must be positive")
    root = Path(root)
    params = {
        "kind": "image_folder",
        "n_classes": n_classes,
        "per_class": per_class,
        "size": size,
        "seed": seed,
        "quality": quality,
    }
    with prepared(root, params) as prep:
        if prep.done:
            _say(f"already prepared: {n_classes * per_class} images in {root}", verbose)
            return root
        from PIL import Image  # lazily: only the benchmarks that make images need Pillow

        _remove_stale_classes(root, n_classes)
        start = time.perf_counter()
        rng = random.Random(seed)
        low = max(2, size // 8)
        for c in range(n_classes):
            folder = root / class_name(c)
            folder.mkdir(parents=True, exist_ok=True)
            tint = bytes(rng.randrange(256) for _ in range(3))
            for i in range(per_class):
                pixels = bytearray(rng.randbytes(low * low * 3))
                for k in range(0, len(pixels), 3):  # blend towards the class tint
                    pixels[k] = (pixels[k] + tint[0]) // 2
                    pixels[k + 1] = (pixels[k + 1] + tint[1]) // 2
                    pixels[k + 2] = (pixels[k + 2] + tint[2]) // 2
                image = Image.frombytes("RGB", (low, low), bytes(pixels))
                image = image.resize((size, size), Image.Resampling.BILINEAR)
                image.save(folder / f"{i:05d}.jpeg", format="JPEG", quality=quality)
        elapsed = time.perf_counter() - start
        prep.info["seconds"] = round(elapsed, 3)
        _say(
            f"generated {n_classes * per_class} images ({n_classes} classes, "
            f"{size}x{size}) in {root} in {elapsed:.1f} s",
            verbose,
        )
    return root


def _remove_stale_classes(root: Path, n_classes: int) -> None:
    """Remove class folders of an older, larger generation (only folders we name)."""
    for child in root.iterdir():
        name = child.name
        if child.is_dir() and len(name) == 5 and name[0] == "c" and name[1:].isdigit():
            if int(name[1:]) >= n_classes:
                shutil.rmtree(child)


def token_dtype(vocab_size: int) -> str:
    """Smallest unsigned type holding every token id: ``uint16`` or ``uint32``."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def make_token_file(
    root: str | os.PathLike,
    n_tokens: int,
    vocab_size: int,
    seed: int = 0,
    *,
    name: str = "tokens.bin",
    verbose: bool = True,
) -> Path:
    """A flat little-endian file of ``n_tokens`` random token ids in ``[0, vocab_size)``.

    The element type is `token_dtype(vocab_size)` (read it back with
    ``numpy.fromfile(path, dtype=...)`` or ``array``). The marker ``<name>.done`` in
    ``root`` records the parameters. Returns the file's path.
    """
    if n_tokens < 1 or vocab_size < 2:
        raise ValueError("n_tokens must be positive and vocab_size at least 2")
    root = Path(root)
    path = root / name
    dtype = token_dtype(vocab_size)
    params = {
        "kind": "token_file",
        "name": name,
        "n_tokens": n_tokens,
        "vocab_size": vocab_size,
        "seed": seed,
        "dtype": dtype,
    }
    with prepared(root, params, marker=f"{name}.done") as prep:
        if prep.done and path.exists():
            _say(f"already prepared: {n_tokens} tokens in {path}", verbose)
            return path
        start = time.perf_counter()
        tmp = path.with_name(path.name + ".partial")
        _write_tokens(tmp, n_tokens, vocab_size, seed, dtype)
        os.replace(tmp, path)
        prep.info["seconds"] = round(time.perf_counter() - start, 3)
        _say(f"generated {n_tokens} tokens (vocabulary {vocab_size}) in {path}", verbose)
    return path


def _write_tokens(path: Path, n_tokens: int, vocab_size: int, seed: int, dtype: str) -> None:
    chunk = 1 << 20
    try:
        import numpy as np
    except ImportError:
        np = None
    with open(path, "wb") as out:
        if np is not None:
            gen = np.random.default_rng(seed)
            little = np.dtype(dtype).newbyteorder("<")
            for lo in range(0, n_tokens, chunk):
                n = min(chunk, n_tokens - lo)
                values = gen.integers(0, vocab_size, n, dtype=dtype)
                out.write(values.astype(little, copy=False).tobytes())
            return
        rng = random.Random(seed)
        code = "H" if dtype == "uint16" else "I"
        for lo in range(0, n_tokens, chunk):
            n = min(chunk, n_tokens - lo)
            values = array(code, (rng.randrange(vocab_size) for _ in range(n)))
            if sys.byteorder != "little":
                values.byteswap()
            out.write(values.tobytes())


def data_dir(name: str) -> str:
    """``$MILABENCH_DIR_DATA/<name>``: where the runner keeps datasets (``data/`` by hand)."""
    return os.path.join(os.environ.get("MILABENCH_DIR_DATA", "data"), name)


def prepare_image_folder(
    argv: list[str] | None,
    *,
    bench: str,
    description: str,
    folder: str,
    classes: int,
    per_class: int,
    size_option: str,
    size: int,
) -> None:
    """The whole ``prepare.py`` of a benchmark that trains on a JPEG folder.

    prepare.py gets the same argv as main.py, so unknown options are ignored; only
    ``--data`` (default ``$MILABENCH_DIR_DATA/<folder>``), ``--classes``,
    ``--images-per-class``, the image size option (``size_option``, e.g.
    ``--image-size``) and ``--synthetic-data`` (nothing to prepare) matter.
    """
    import argparse  # lazily: only prepare scripts parse options here

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", default=None, help=f"default: $MILABENCH_DIR_DATA/{folder}")
    parser.add_argument(size_option, dest="size", type=int, default=size)
    parser.add_argument("--classes", type=int, default=classes)
    parser.add_argument("--images-per-class", type=int, default=per_class)
    parser.add_argument("--synthetic-data", action="store_true")
    args, _unknown = parser.parse_known_args(argv)
    if args.synthetic_data:
        print(f"{bench}: synthetic data, nothing to prepare", flush=True)
        return
    make_image_folder(
        args.data or data_dir(folder),
        n_classes=args.classes,
        per_class=args.images_per_class,
        size=args.size,
    )


def prepare_fake_imagenet(argv: list[str] | None, bench: str) -> None:
    """``prepare.py`` of the benchmarks that train on ``$MILABENCH_DIR_DATA/FakeImageNet``
    (torchvision, lightning, dinov2): one folder, one layout (1000 classes x 16 JPEGs of
    256 px unless ``--classes``, ``--images-per-class``, ``--source-size`` say otherwise),
    so the entries that share it prepare it once."""
    prepare_image_folder(
        argv,
        bench=bench,
        description=f"Generate the ImageNet-style JPEG folder of the {bench} entries",
        folder="FakeImageNet",
        classes=1000,
        per_class=16,
        size_option="--source-size",
        size=256,
    )
