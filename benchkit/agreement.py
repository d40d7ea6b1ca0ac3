"""How the ranks of a distributed run agree on when to decide and when to stop.

Every rank iterates and times its own steps, but decisions must be the same on every
rank: a rank that stops while the others wait in an all-reduce hangs the job. So ranks
meet at step counts they agreed on beforehand (about once per decision period, from the
pace of the last stretch), and at a meeting:

* `sum_sizes` adds up the per-step batch sizes over the ranks (two small all-reduces per
  meeting, none per step), so rank 0 reports the global throughput;
* `meet` carries rank 0's verdict (stop if any rank says so) and the next meeting point
  (the nearest proposal) in one all-reduce.

Contract: every rank calls `sum_sizes` then `meet` at the same step counts, in the same
order. On an NCCL job these collectives go through a gloo side group, so agreeing never
synchronises the device. torch is never imported here: an `Agreement` only exists once
the benchmark initialised ``torch.distributed``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Meetings are at most this many steps apart, however short a step is.
MAX_STEPS_BETWEEN_MEETINGS = 100_000


def process_group() -> tuple[int, int, Any]:
    """(rank, world_size, torch.distributed or None) of an initialised process group;
    without one, ``RANK``/``WORLD_SIZE`` from the environment (and no module)."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), dist
    rank = int(os.environ.get("RANK", "0") or 0)
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    return rank, world, None


def control_group(dist: Any) -> Any:
    """A gloo group for the ranks' small decisions when the default group is NCCL, so
    that agreeing on a stop never synchronises the device (None: use the default)."""
    try:
        if dist.get_backend() == "gloo":
            return None
        return dist.new_group(backend="gloo")
    except Exception:  # noqa: BLE001 - gloo unavailable: fall back to the default group
        return None


class Agreement:
    """The meetings of the ranks of one process group (see module doc).

    ``period``: seconds the ranks aim to run between two meetings. ``next_meeting`` is
    the step count of the next one; every rank stops its loop there for a decision.
    """

    def __init__(self, dist: Any, period: float) -> None:
        self.dist = dist
        self.period = period
        self.group = control_group(dist)
        self.next_meeting = 1
        self.last_meeting = (0, 0.0)  # (step count, perf_counter) of the last meeting

    def continue_from(self, previous: Agreement) -> None:
        """Keep the schedule of ``previous`` (one window across several loaders)."""
        self.next_meeting = previous.next_meeting
        self.last_meeting = previous.last_meeting

    def started(self, count: int, now: float) -> None:
        """The first step begins: the pace is measured from here."""
        self.last_meeting = (count, now)

    def _device(self) -> str:
        """Where the decision tensors live: the host with the gloo side group (or a gloo
        job); the current GPU when only an NCCL group is there (it takes no host tensor)."""
        if self.group is None and self.dist.get_backend() == "nccl":
            return f"cuda:{sys.modules['torch'].cuda.current_device()}"
        return "cpu"

    def sum_sizes(self, sizes: list[float]) -> list[float]:
        """Per-step sizes summed over the ranks (ranks may have issued different numbers
        of steps since the last meeting: the shorter lists are padded with zeros)."""
        torch = sys.modules["torch"]
        dist = self.dist
        device = self._device()
        length = torch.tensor([len(sizes)], dtype=torch.int64, device=device)
        dist.all_reduce(length, op=dist.ReduceOp.MAX, group=self.group)
        n = int(length.item())
        if n == 0:
            return []
        padded = sizes + [0.0] * (n - len(sizes))
        values = torch.tensor(padded, dtype=torch.float64, device=device)
        dist.all_reduce(values, op=dist.ReduceOp.SUM, group=self.group)
        return values.tolist()[: len(sizes)]

    def meet(self, stop_now: bool, count: int, now: float, within: int | None) -> bool:
        """Decide together at step ``count``: stop if any rank says so; otherwise meet
        again after about ``period`` seconds of steps at the pace since the last meeting,
        at most ``within`` steps from now (a count bound ahead), at the nearest proposal."""
        steps = count - self.last_meeting[0]
        per_step = (now - self.last_meeting[1]) / steps if steps > 0 else 0.0
        proposal = 1
        if per_step > 0:
            proposal = int(min(MAX_STEPS_BETWEEN_MEETINGS, max(1, self.period / per_step)))
        if within is not None:
            proposal = min(proposal, within)
        torch = sys.modules["torch"]
        dist = self.dist
        values = torch.tensor(
            [1 if stop_now else 0, -proposal], dtype=torch.int64, device=self._device()
        )
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self.group)
        stop_flag, negated = (int(x) for x in values.tolist())
        self.last_meeting = (count, now)
        self.next_meeting = count + max(1, -negated)
        return stop_flag > 0
