"""DataLoader workers and the shared memory they hand their batches through.

A torch DataLoader worker puts every batch it makes in shared memory (a file of
/dev/shm); the main process maps it, and the file's space is freed only when the batch
is. Each worker keeps up to ``prefetch_factor`` batches made ahead, so a loader holds up
to ``workers x prefetch + 2`` batches there (the 2: the one the step uses and the one
being pinned), and every process of the node has its own loader. When /dev/shm is smaller (a
container's default is 64 MiB), a worker fails mid-run with ``unable to allocate shared
memory``, or dies of a bus error.

`fit_prefetch` is the check a loader makes before it starts: the prefetch asked for
when the node's loaders fit in /dev/shm, else the largest that fits, said in one line (a
``message`` event marked ``warning: shm`` that the report lists); when not even one
batch per worker fits, `SharedMemoryTooSmall` says what is needed and how to get it.
Standard library at module level (benchkit's rule); torch only inside the functions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from benchkit.hostmem import SHM_PATH, shm_space

GIB, MIB = 2**30, 2**20
#: Batches a loader holds beyond its workers' prefetched ones: the step's and the one
#: being copied to pinned memory.
IN_HAND = 2
#: The share of /dev/shm the node's loaders may plan on (the rest: other files there,
#: a batch larger than its estimate).
SHM_SHARE = 0.9
FIX = (
    "give it more: `docker run --shm-size=<size>` or `--ipc=host`, Kubernetes an emptyDir "
    "of medium Memory mounted at /dev/shm, or `mount -o remount,size=<size> /dev/shm`"
)


class SharedMemoryTooSmall(RuntimeError):
    """/dev/shm cannot hold one batch per worker of the node's loaders."""


def _size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def loader_need(batch_bytes: int, workers: int, prefetch: int, ranks: int = 1) -> int:
    """Bytes of shared memory the loaders of ``ranks`` processes hold at most, each with
    ``workers`` workers making ``prefetch`` batches ahead (none without workers)."""
    if workers <= 0:
        return 0
    return ranks * (workers * prefetch + IN_HAND) * batch_bytes


def fit_prefetch(
    batch_bytes: int,
    workers: int,
    prefetch: int,
    *,
    ranks: int = 1,
    space: tuple[int, int] | None | Callable[[], tuple[int, int] | None] = shm_space,
    label: str = "",
) -> tuple[int, str | None]:
    """(prefetch, warning): ``prefetch`` and None when the node's loaders fit in
    `SHM_SHARE` of /dev/shm's size (``space``: (size, free), None when unknown: not
    checked); else the largest prefetch that fits and one line saying so. Raises
    `SharedMemoryTooSmall` when not even 1 fits. The size, not the free space: the job's
    other ranks take theirs as they start."""
    found = space() if callable(space) else space
    if workers <= 0 or found is None or batch_bytes <= 0:
        return prefetch, None
    budget = int(found[0] * SHM_SHARE)
    if loader_need(batch_bytes, workers, prefetch, ranks) <= budget:
        return prefetch, None
    fits = max(
        (p for p in range(1, prefetch) if loader_need(batch_bytes, workers, p, ranks) <= budget),
        default=0,
    )
    what = (
        f"{workers} loader workers x {ranks} process(es), batches of {_size(batch_bytes)}: "
        f"{SHM_PATH} is {_size(found[0])}"
    )
    lead = f"{label}: " if label else ""
    if not fits:
        need = loader_need(batch_bytes, workers, 1, ranks)
        raise SharedMemoryTooSmall(
            f"{lead}{what}, and one batch per worker needs {_size(need / SHM_SHARE)}: {FIX}"
        )
    return fits, (
        f"{lead}{what}: prefetching {fits} batches per worker instead of {prefetch} "
        f"(a loader-bound rate may suffer); {FIX}"
    )


def tensor_bytes(obj: Any) -> int:
    """Bytes of the tensors and arrays in ``obj`` (nested tuples, lists and dicts; a
    torch_geometric batch's tensors through its ``to_dict``); 0 for anything else."""
    if hasattr(obj, "element_size") and hasattr(obj, "numel"):
        return int(obj.numel() * obj.element_size())
    if hasattr(obj, "nbytes") and hasattr(obj, "dtype"):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    to_dict = getattr(obj, "to_dict", None)
    return tensor_bytes(to_dict()) if callable(to_dict) else 0


def sampled_batch_bytes(dataset: Any, batch_size: int) -> int:
    """Bytes of a batch of ``batch_size`` samples the size of ``dataset[0]`` (0 for an
    iterable data set, or one with no sample). The random state of Python, NumPy
    and torch is left as it was: the loader's seeds do not move."""
    import random

    import torch

    if isinstance(dataset, torch.utils.data.IterableDataset):
        return 0
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        return 0
    if len(dataset) == 0:
        return 0
    state = random.getstate()
    numpy = sys.modules.get("numpy")
    np_state = numpy.random.get_state() if numpy is not None else None
    try:
        with torch.random.fork_rng(devices=[]):
            sample = dataset[0]
    finally:
        random.setstate(state)
        if np_state is not None:
            numpy.random.set_state(np_state)
    return tensor_bytes(sample) * batch_size


def loader_prefetch(
    batch_bytes: int, workers: int, prefetch: int = 2, *, label: str = ""
) -> int | None:
    """The ``prefetch_factor`` a DataLoader of ``workers`` workers and batches of
    ``batch_bytes`` is given on this node (`fit_prefetch`, its ranks from
    `benchkit.memory.ranks`, a warning said by `benchkit.channel.warn`); None without workers (what
    DataLoader wants then)."""
    if workers <= 0:
        return None
    from benchkit.memory import ranks

    fitted, warning = fit_prefetch(batch_bytes, workers, prefetch, ranks=ranks()[1], label=label)
    if warning:
        from benchkit.channel import warn

        warn(warning, "shm")
    return fitted
