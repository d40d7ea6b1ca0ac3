"""The steps issued but not yet converted into durations and records.

A training loop appends one (start, end, size) per step to `PendingSteps` (the three
lists, appended to directly: that is the whole cost of a step); between two steps the
meter asks how many have completed (`ready`) and takes them out, oldest first (`take`).
``first`` is the index of the step at the head of the lists, so that a converted step
is known to be warm-up or measured whatever the time it took to complete.

In a distributed run the sizes are summed over the ranks at each meeting (`sum_new`):
``summed`` holds the summed sizes of the head of the pending steps, and only steps whose
sum is known are converted; ranks other than 0 report nothing and forget the summed
steps (`drop_summed`).
"""

from __future__ import annotations

from typing import Any

from benchkit.agreement import Agreement
from benchkit.clock import Clock


class PendingSteps:
    """Starts, ends and sizes of the pending steps (stamps of the run's clock)."""

    def __init__(self, first: int = 0) -> None:
        self.starts: list[Any] = []
        self.ends: list[Any] = []
        self.sizes: list[Any] = []
        self.summed: list[float] = []
        self.first = first

    def __len__(self) -> int:
        return len(self.ends)

    def ready(self, clock: Clock, final: bool, summed_only: bool) -> int:
        """How many steps can be converted now: their end has completed (``final``:
        wait for the last one), and, with ``summed_only``, their summed size is known."""
        n = len(self.ends)
        if summed_only:
            n = min(n, len(self.summed))
        return clock.ready(self.ends, n, final)

    def take(
        self, k: int, summed: bool, world_size: int
    ) -> tuple[list[Any], list[Any], list[float]]:
        """Remove the ``k`` oldest steps: (starts, ends, sizes). Sizes are the summed
        ones with ``summed``; otherwise the own sizes times ``world_size`` (without a
        process group to ask, the ranks are assumed equal)."""
        starts, ends = self.starts[:k], self.ends[:k]
        if summed:
            sizes = self.summed[:k]
            del self.summed[:k]
        else:
            sizes = [float(x) for x in self.sizes[:k]]
            if world_size > 1:
                sizes = [x * world_size for x in sizes]
        del self.starts[:k], self.ends[:k], self.sizes[:k]
        self.first += k
        return starts, ends, sizes

    def sum_new(self, agreement: Agreement) -> None:
        """Sum the sizes of the steps issued since the last meeting over the ranks."""
        fresh = [float(s) for s in self.sizes[len(self.summed) :]]
        self.summed.extend(agreement.sum_sizes(fresh))

    def drop_summed(self) -> None:
        """Forget the steps whose sum is known (a rank that reports nothing)."""
        k = len(self.summed)
        del self.starts[:k], self.ends[:k], self.sizes[:k], self.summed[:k]
        self.first += k
