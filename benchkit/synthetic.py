"""A few synthetic samples made once on the host, served in a loop by a torch DataLoader.

This is how upstream milabench feeds its transformers benchmarks (bert-*, t5, reformer,
whisper): ``batch_size`` samples are generated once, a map-style dataset repeats them
(item ``i`` is sample ``i % n``), and a plain `torch.utils.data.DataLoader` (default
collation, no pinned memory, ``num_workers`` worker processes) stacks them into batches
that the training loop copies to the device at every step. The copy is part of the
step: for whisper's 64 clips of 80 x 3000 features it moves 61 MB per step.

Standard library at module level (benchkit's rule); torch only inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Upstream's ``SyntheticData(repeat=100000)``: a loader far longer than any window.
REPEAT = 100_000


class RepeatedSamples:
    """Map-style dataset of ``len(samples) * repeat`` items: item ``i`` is
    ``samples[i % len(samples)]``. A plain class (no torch base), so that it pickles for
    worker processes under any start method."""

    def __init__(self, samples: Sequence[Any], repeat: int = REPEAT) -> None:
        if not samples:
            raise ValueError("RepeatedSamples needs at least one sample")
        self.samples = list(samples)
        self.repeat = repeat

    def __len__(self) -> int:
        return len(self.samples) * self.repeat

    def __getitem__(self, index: int) -> Any:
        return self.samples[index % len(self.samples)]


def repeated_loader(samples: Sequence[Any], batch_size: int, num_workers: int = 0) -> Any:
    """A `DataLoader` over `RepeatedSamples` (in order, default collation, pageable
    memory): with ``len(samples) == batch_size`` every batch holds the same samples. Its
    workers prefetch torch's 2 batches each, fewer where /dev/shm cannot hold them."""
    from torch.utils.data import DataLoader

    from benchkit.shm import loader_prefetch, tensor_bytes

    workers = max(0, num_workers)
    batch_bytes = tensor_bytes(samples[0]) * batch_size if samples else 0
    prefetch = loader_prefetch(batch_bytes, workers, 2, label="loader")
    return DataLoader(
        RepeatedSamples(samples), batch_size=batch_size, num_workers=workers,
        prefetch_factor=prefetch,
    )  # fmt: skip


def collate(samples: Sequence[Any]) -> Any:
    """The batch the loader makes of ``samples`` (torch's default collation)."""
    from torch.utils.data import default_collate

    return default_collate(list(samples))


def to_device(batch: dict[str, Any], device: Any) -> dict[str, Any]:
    """Every tensor of a batch copied to ``device`` (a plain ``.to``: blocking from pageable
    memory, as upstream's loop does it)."""
    return {key: value.to(device) for key, value in batch.items()}
