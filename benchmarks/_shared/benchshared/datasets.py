"""Synthetic datasets for benchmarks' ``prepare.py``, generated once and then kept.

Benchmarks must not depend on the network, so prepare steps generate data of the right
shape instead of downloading it: an ImageNet-style folder of random JPEG images (one
sub-folder per class) and flat files of random token ids. Preparing is idempotent: a
``done`` marker holding the generation parameters is written *last* (atomically), so an
interrupted generation is redone and a finished one is detected in microseconds; asking
for different parameters regenerates (an image folder of the same layout is only grown,
never shrunk: `make_image_folder`). A folder that several ranks read is sized from the
node's GPUs, the entry's batch size and its measurement window (`images_per_class`,
`node_ranks`, `batches_per_rank`; `fake_imagenet_plan` says what a prepare would hold).
A set too costly to size so (V-JEPA's videos) is read in passes by `timed_passes`, which
leaves each pass's first batch out of the timing, as upstream's timer does.

Standard library only; Pillow is imported lazily by `make_image_folder` (the benchmark's
own environment has it) and numpy, when importable, only speeds up `make_token_file`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shutil
import sys
import time
from array import array
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

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


# Version of the image content: a marker written by another version (or by none) means
# the folder is regenerated from scratch rather than grown.
IMAGE_LAYOUT = 2
# Fewer images than this are generated in this process: a pool costs more than it saves.
PARALLEL_MIN_IMAGES = 2000
MAX_GENERATION_WORKERS = 32


def _class_folder_names(root: Path) -> list[Path]:
    """The class folders of ``root`` that this module writes (``c0000``...), nothing else."""
    if not root.is_dir():
        return []
    return [
        child
        for child in root.iterdir()
        if child.is_dir() and len(child.name) == 5 and child.name[0] == "c"
        and child.name[1:].isdigit()
    ]  # fmt: skip


def _write_class(task: tuple[str, int, int, int, int, int, int, bool]) -> int:
    """Images ``start..stop-1`` of class ``c``: ``(root, c, start, stop, size, seed,
    quality, noise)``. Image ``i`` of class ``c`` depends only on ``(seed, c, i, size,
    quality, noise)``, so a folder grown in several calls, or by several processes, is the
    folder one call makes. Each file is written under a temporary name and renamed, so a
    reader never sees half an image. Returns the number of images written."""
    root, c, start, stop, size, seed, quality, noise = task
    from PIL import Image  # lazily: only the benchmarks that make images need Pillow

    folder = Path(root) / class_name(c)
    folder.mkdir(parents=True, exist_ok=True)
    low = max(2, size // 8)
    tint_rng = random.Random(f"{seed}/{c}")
    tint = Image.new("RGB", (low, low), tuple(tint_rng.randrange(256) for _ in range(3)))
    for i in range(start, stop):
        rng = random.Random(f"{seed}/{c}/{i}")
        if noise:  # uniform random bytes at full size (upstream's datagen)
            image = Image.frombytes("RGB", (size, size), rng.randbytes(size * size * 3))
        else:
            pattern = Image.frombytes("RGB", (low, low), rng.randbytes(low * low * 3))
            image = Image.blend(pattern, tint, 0.5)  # halfway to the class tint
            image = image.resize((size, size), Image.Resampling.BILINEAR)
        path = folder / f"{i:05d}.jpeg"
        partial = path.with_name(path.name + ".partial")
        image.save(partial, format="JPEG", quality=quality)
        os.replace(partial, path)
    return stop - start


def generation_workers(images: int) -> int:
    """Processes that generate ``images`` images: 1 below `PARALLEL_MIN_IMAGES`, else
    every CPU this process may use, at most `MAX_GENERATION_WORKERS`."""
    if images < PARALLEL_MIN_IMAGES:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, MAX_GENERATION_WORKERS))


def _run_tasks(tasks: list[tuple[str, int, int, int, int, int, int, bool]], workers: int) -> None:
    """`_write_class` for every task, in ``workers`` processes (here when 1)."""
    if workers <= 1 or len(tasks) < 2:
        for task in tasks:
            _write_class(task)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork: the children need nothing but this module, and a prepare script has no
    # threads; spawn elsewhere.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context) as pool:
        for _ in pool.map(_write_class, tasks, chunksize=max(1, len(tasks) // (8 * workers))):
            pass


def make_image_folder(
    root: str | os.PathLike,
    n_classes: int = 10,
    per_class: int = 16,
    size: int = 64,
    seed: int = 0,
    *,
    quality: int = 85,
    noise: bool = False,
    verbose: bool = True,
    workers: int | None = None,
) -> Path:
    """An ImageNet-style folder ``root/<class>/<i>.jpeg`` of random RGB JPEG images, with
    at least ``per_class`` images in each of ``n_classes`` classes.

    Each image is a low-resolution random pattern scaled up to ``size`` x ``size`` with a
    per-class tint, so that JPEG decoding costs what it costs on photographs (smooth
    content) rather than on pure noise, and classes are not all alike; with ``noise``,
    uniform random bytes at full size (what upstream milabench's FakeImageNet holds:
    larger files, slower to decode). ``quality``: the JPEG quality. Deterministic for
    a given ``seed``: image ``i`` of class ``c`` is the same whichever call made it.

    Idempotent and grow-only. The ``done`` marker (written last) records the layout
    (classes, size, seed, quality, noise) and the images per class. A folder of the same layout
    with at least ``per_class`` images is kept as it is (entries that share a folder but
    need different sizes leave it at the largest, and never regenerate it for one
    another); one with fewer is completed with the missing images only; a folder of
    another layout, or without a marker (an interrupted first generation), is emptied of
    its class folders and generated again. ``workers`` processes generate (default
    `generation_workers`). Returns ``root``; prints where the data is (or that it was
    already there).
    """
    if n_classes < 1 or per_class < 1 or size < 1:
        raise ValueError("n_classes, per_class and size must be positive")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    layout = _normalise(
        {
            "kind": "image_folder",
            "layout": IMAGE_LAYOUT,
            "n_classes": n_classes,
            "size": size,
            "seed": seed,
            "quality": quality,
            "noise": noise,
        }
    )
    marker = root / MARKER
    found = (read_marker(marker) or {}).get("params") or {}
    have = 0
    if isinstance(found, dict) and {key: found.get(key) for key in layout} == layout:
        have = found.get("per_class") if isinstance(found.get("per_class"), int) else 0
    if have >= per_class:
        _say(f"already prepared: {n_classes * have} images in {root}", verbose)
        return root
    if have <= 0:  # another layout, or no finished generation: start from nothing
        marker.unlink(missing_ok=True)
        for folder in _class_folder_names(root):
            shutil.rmtree(folder)
    start = time.perf_counter()
    new = n_classes * (per_class - have)
    tasks = [(str(root), c, have, per_class, size, seed, quality, noise) for c in range(n_classes)]
    _run_tasks(tasks, generation_workers(new) if workers is None else workers)
    elapsed = time.perf_counter() - start
    _write_marker(marker, {**layout, "per_class": per_class}, {"seconds": round(elapsed, 3)})
    shape = f"{n_classes} classes, {size}x{size}"
    if have:
        _say(
            f"added {new} images ({shape}) to {root}: {n_classes * per_class} in all, "
            f"in {elapsed:.1f} s",
            verbose,
        )
    else:
        _say(f"generated {new} images ({shape}) in {root} in {elapsed:.1f} s", verbose)
    return root


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


# -- how many images a folder that several ranks read needs ---------------------------------

# The shortest step, at its batch size, of the entries that read the shared image folder,
# on the GPUs the set is sized for (resnet152 at 256 images per GPU, about 1,000 images/s
# on an H100: 0.26 s; DINOv2-g at 32: about 0.3 s). docs/benchmarks.md has the figures.
STEP_FLOOR_S = 0.25
# Batches per rank when the entry's window has no time bound (``measure.max: 0``).
DEFAULT_BATCHES_PER_RANK = 160


def entry_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The resolved entry a prepare or run process gets in ``MILABENCH_CONFIG`` (JSON);
    ``{}`` when it is absent or holds a suite path (a script run by hand)."""
    text = (os.environ if environ is None else environ).get("MILABENCH_CONFIG", "")
    if not text.lstrip().startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def batches_per_rank(measure: Any = None) -> int:
    """Batches one rank must be able to read without starting a new pass over the data:
    its longest warm-up plus its longest window (``measure.warmup_max + measure.max``,
    docs/measurement.md) at one step per `STEP_FLOOR_S` seconds; 160 with the default
    window (10 s + 30 s). An unreadable ``measure`` block counts as the default (the
    configuration check reports it)."""
    from benchkit.options import parse_measure  # the window's settings: standard library only

    try:
        settings = parse_measure(dict(measure) if isinstance(measure, Mapping) else None)
    except ValueError:
        settings = parse_measure(None)
    span = settings.warmup_max + settings.max
    if settings.max <= 0 or span <= 0:
        return DEFAULT_BATCHES_PER_RANK
    return max(1, math.ceil(span / STEP_FLOOR_S - 1e-9))


def node_ranks(
    environ: Mapping[str, str] | None = None, entry: Mapping[str, Any] | None = None
) -> int:
    """The ranks a data set of one node must serve: the node's GPUs
    (``MILABENCH_GPU_COUNT``, which milabench sets from the resolved system; at least 1)
    times the entry's ``num_machines`` (every node holds the whole set, each rank reads
    1/ranks of it). A mono-GPU entry's processes each read the whole set, so the same
    number covers them."""
    env = os.environ if environ is None else environ
    entry = entry_config(env) if entry is None else entry
    try:
        gpus = int(env.get("MILABENCH_GPU_COUNT") or 0)
    except ValueError:
        gpus = 0
    machines = entry.get("num_machines")
    if isinstance(machines, bool) or not isinstance(machines, int):
        machines = 1
    return max(gpus, 1) * max(machines, 1)


def images_per_class(batch_size: int, ranks: int, batches: int, classes: int) -> int:
    """Images per class so that each of ``ranks`` ranks gets ``batches`` whole batches of
    ``batch_size``: ``ceil(batch_size * batches * ranks / classes)``."""
    if min(batch_size, ranks, batches, classes) < 1:
        raise ValueError("batch_size, ranks, batches and classes must be positive")
    return -(-batch_size * batches * ranks // classes)


@dataclass(frozen=True)
class FolderPlan:
    """What the prepare step of an image folder leaves: ``per_class`` images in each of
    ``classes`` classes of ``size`` px under ``root`` (``per_class`` 0: synthetic data,
    nothing to prepare). ``sizing`` says how the count was chosen when it was scaled to
    the node (one line, printed by `prepare_image_folder`), else it is empty."""

    root: str
    classes: int
    per_class: int
    size: int
    sizing: str = ""

    @property
    def images(self) -> int:
        """Images in the folder: ``classes x per_class``."""
        return self.classes * self.per_class


def plan_image_folder(
    argv: list[str] | None,
    *,
    folder: str,
    classes: int,
    per_class: int,
    size_option: str,
    size: int,
    scale: bool = False,
    environ: Mapping[str, str] | None = None,
    description: str = "",
) -> FolderPlan:
    """The folder `prepare_image_folder` makes for ``argv`` (main.py's argv; unknown
    options are ignored) under the variables ``environ`` (default ``os.environ``:
    ``MILABENCH_CONFIG``, ``MILABENCH_GPU_COUNT``, ``MILABENCH_DIR_DATA``), without
    writing anything. Options read: ``--data``, ``--classes``, ``--images-per-class``,
    ``size_option``, ``--batch-size``, ``--synthetic-data``. The count is
    ``--images-per-class`` when given; else, with ``scale`` and a ``--batch-size``,
    enough for every rank of the node to read `batches_per_rank` batches
    (`images_per_class`, `node_ranks`); else ``per_class``."""
    import argparse  # lazily: only prepare scripts parse options here

    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", default=None, help=f"default: $MILABENCH_DIR_DATA/{folder}")
    parser.add_argument(size_option, dest="size", type=int, default=size)
    parser.add_argument("--classes", type=int, default=classes)
    parser.add_argument("--images-per-class", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--synthetic-data", action="store_true")
    args, _unknown = parser.parse_known_args(argv)
    root = args.data or os.path.join(env.get("MILABENCH_DIR_DATA", "data"), folder)
    if args.synthetic_data:
        return FolderPlan(root, args.classes, 0, args.size)
    count, sizing = args.images_per_class, ""
    if count is None and scale and args.batch_size:
        entry = entry_config(env)
        ranks, batches = node_ranks(env, entry), batches_per_rank(entry.get("measure"))
        count = images_per_class(args.batch_size, ranks, batches, args.classes)
        sizing = (
            f"{folder} sized for {ranks} rank(s) x {batches} batches of {args.batch_size}: "
            f"{count} images in each of {args.classes} classes"
        )
    return FolderPlan(root, args.classes, per_class if count is None else count, args.size, sizing)


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
    scale: bool = False,
    noise: bool = False,
    quality: int = 85,
) -> None:
    """The whole ``prepare.py`` of a benchmark that trains on a JPEG folder (``noise``,
    ``quality``: the images' content and JPEG quality, `make_image_folder`).

    prepare.py gets the same argv as main.py, so unknown options are ignored; the folder
    and its size are `plan_image_folder`'s (``--images-per-class`` when given; else, with
    ``scale``, enough for every rank of the node to read `batches_per_rank` batches of
    ``--batch-size``; else ``per_class``); ``--synthetic-data`` prepares nothing.
    """
    plan = plan_image_folder(
        argv, folder=folder, classes=classes, per_class=per_class,
        size_option=size_option, size=size, scale=scale, description=description,
    )  # fmt: skip
    if not plan.per_class:
        print(f"{bench}: synthetic data, nothing to prepare", flush=True)
        return
    if plan.sizing:
        print(f"{bench}: {plan.sizing}", flush=True)
    make_image_folder(
        plan.root,
        n_classes=plan.classes,
        per_class=plan.per_class,
        size=plan.size,
        noise=noise,
        quality=quality,
    )


# The shared folder of the torchvision, Lightning and DINOv2 entries: 1000 classes of
# 384 px JPEGs (upstream's FakeImageNet layout), sized by the entry (`plan_image_folder`).
FAKE_IMAGENET: dict[str, Any] = {
    "folder": "FakeImageNet",
    "classes": 1000,
    "per_class": 16,
    "size_option": "--source-size",
    "size": 384,
    "scale": True,
}


def fake_imagenet_plan(
    argv: list[str] | None, environ: Mapping[str, str] | None = None
) -> FolderPlan:
    """The folder `prepare_fake_imagenet` leaves for ``argv`` under ``environ`` (what a
    test or a planner reads without generating 300,000 images)."""
    return plan_image_folder(argv, environ=environ, **FAKE_IMAGENET)


def prepare_fake_imagenet(argv: list[str] | None, bench: str) -> None:
    """``prepare.py`` of the benchmarks that train on ``$MILABENCH_DIR_DATA/FakeImageNet``
    (torchvision, lightning, dinov2): one folder, one layout (1000 classes of 384 px
    JPEGs, as upstream's), sized by the entry: ``--images-per-class`` when given (the
    smoke suite's tiny sets), else enough for every rank of the node to read
    `batches_per_rank` batches of the entry's ``--batch-size`` without a second pass
    (256 x 160 x 8 GPUs: 328 images per class), else 16 per class. The entries that
    share it grow it to the largest of their sizes and never regenerate it for one
    another (`make_image_folder`)."""
    prepare_image_folder(
        argv,
        bench=bench,
        description=f"Generate the ImageNet-style JPEG folder of the {bench} entries",
        **FAKE_IMAGENET,
        noise=True,  # uniform random bytes, Pillow's default quality: upstream's datagen
        quality=75,
    )


# -- reading a data set in passes ------------------------------------------------------------


class TimedLoop(Protocol):
    """What `timed_passes` needs of `benchkit.timing.TimedIterator`: one epoch per
    ``iter()``, and ``done`` once the measurement window is over."""

    @property
    def done(self) -> bool: ...

    def __iter__(self) -> Iterator[Any]: ...


def timed_passes(timed: TimedLoop, sampler: Any = None) -> Iterator[Any]:
    """Every batch of every pass over a loader, until the measurement window ends.

    ``timed`` wraps the loader itself (not a generator that chains passes), so each pass
    is one of its epochs and the first batch of every pass is fetched before the clock
    restarts, as upstream's timer does (benchmate's ``TimedIterator.__iter__`` fetches a
    batch before recording its first event): the wait for the workers to make a pass's
    first batch is left out of the rate, the rest of the pass is timed. Before pass
    ``n`` (from 0) ``sampler.set_epoch(n)`` is called when it has one (a
    ``DistributedSampler``). A pass that yields nothing while the window is open raises
    ValueError: the data set holds no whole batch, and the loop would never end.
    """
    for number in itertools.count():
        if timed.done:
            return
        if sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(number)
        empty = True
        for batch in timed:
            empty = False
            yield batch
        if empty and not timed.done:
            raise ValueError(
                f"pass {number} over the data held no whole batch: prepare a larger data set"
            )
