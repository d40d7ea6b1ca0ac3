"""Peak host memory of a benchmark's whole process tree, sampled while it runs.

While a local process runs, `watch` samples the resident set size of the leader and
every descendant (torchrun's workers, data-loader workers) about once a second and hands
``process_tree`` records (``rss``, ``peak_rss``, ``processes``, ``peak_processes``;
docs/run-data.md) to the runner, which writes them into the process's event stream like
any other metric record. The tree is walked through ``/proc/<pid>/task/<tid>/children``,
one ``statm`` read per process, in a worker thread so that the event loop never waits on
``/proc``. Shared pages count once per process (an upper bound); zombies and remote
(SSH) processes are not counted. Nothing here raises: a process that exits between two
reads or a permission error just drops out of that sample. Costs and limits:
docs/performance.md "Memory sampling of process trees".
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# Sampling schedule: soon after the start (a short process must still be seen, and its
# first allocations are often its largest), then once per `INTERVAL`.
EARLY_DELAYS = (0.05, 0.1, 0.2, 0.3)
INTERVAL = 1.0
# A record is emitted when the peak grew by more than `GROWTH` since the last record, or
# when `HEARTBEAT` seconds passed without one; the runner adds a final one before `end`.
GROWTH = 0.01
HEARTBEAT = 5.0


def _rss(pid: int) -> int:
    """Resident bytes of ``pid`` (0 when gone, a zombie, or unreadable)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            fields = f.read().split()
        return int(fields[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


def _children(pid: int) -> list[int] | None:
    """Direct children of ``pid`` from procfs; None when the kernel has no such file."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out  # gone meanwhile
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended between listdir and open
            return None  # CONFIG_PROC_CHILDREN is off: the caller falls back to psutil
        except (OSError, ValueError):
            continue
    return out


def tree_pids(pid: int) -> list[int]:
    """``pid`` and every descendant still attached to it (breadth first, no duplicate)."""
    seen = {pid}
    order = [pid]
    i = 0
    while i < len(order):
        kids = _children(order[i])
        if kids is None:
            return _tree_pids_psutil(pid)
        i += 1
        for kid in kids:
            if kid not in seen:
                seen.add(kid)
                order.append(kid)
    return order


def _tree_pids_psutil(pid: int) -> list[int]:
    """The slow, portable way (every process's ``stat`` is read) for kernels without it."""
    try:
        return [pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return [pid]


@dataclass(frozen=True)
class TreeSample:
    """One look at the tree: summed RSS and the number of living processes in it."""

    time: float
    rss: int
    processes: int


class TreeSampler:
    """Samples one process tree; keeps the last living sample and the peaks.

    ``extra`` returns processes that belong to the benchmark yet may have left the tree
    (a descendant that called ``setsid`` and whose parent died is re-parented to init):
    the launcher's `ProcessTracker` remembers them, and they count while they live.
    `sample` may run in a worker thread while `record` is read from the event loop: a
    lock keeps the two consistent.
    """

    def __init__(
        self, pid: int, extra: Callable[[], Iterable[psutil.Process]] | None = None
    ) -> None:
        self.pid = pid
        self.extra = extra
        self.peak_rss = 0
        self.peak_processes = 0
        self.samples = 0
        self.last: TreeSample | None = None  # the last sample with a living process
        self._lock = threading.Lock()

    def _extra_pids(self, known: set[int]) -> list[int]:
        if self.extra is None:
            return []
        out = []
        try:
            procs = list(self.extra())
        except Exception:  # a tracker being torn down must not break sampling
            return out
        for proc in procs:
            if proc.pid in known:
                continue
            try:
                if proc.is_running():  # pid reuse safe: compares the creation time
                    out.append(proc.pid)
            except psutil.Error:
                continue
        return out

    def sample(self) -> TreeSample:
        """Look at the tree now (never raises; a vanished process counts for nothing)."""
        with self._lock:
            try:
                pids = tree_pids(self.pid)
                pids += self._extra_pids(set(pids))
                rss = count = 0
                for pid in pids:
                    value = _rss(pid)
                    if value:
                        rss += value
                        count += 1
            except Exception:  # defensive: sampling is an observer, never a failure
                rss = count = 0
            now = time.time()
            sample = TreeSample(now, rss, count)
            self.samples += 1
            if count:
                self.last = sample
                self.peak_rss = max(self.peak_rss, rss)
                self.peak_processes = max(self.peak_processes, count)
            return sample

    def record(self) -> dict:
        """The ``process_tree`` metric record of what is known now (no new sample)."""
        with self._lock:
            last = self.last
            return {
                "task": "main",
                "time": time.time(),
                "process_tree": {
                    "rss": last.rss if last is not None else 0,
                    "peak_rss": self.peak_rss,
                    "processes": last.processes if last is not None else 0,
                    "peak_processes": self.peak_processes,
                },
            }


async def watch(
    sampler: TreeSampler,
    emit: Callable[[dict], None],
    *,
    interval: float = INTERVAL,
    heartbeat: float = HEARTBEAT,
    growth: float = GROWTH,
) -> None:
    """Sample until cancelled; ``emit(record)`` when the peak grew or a heartbeat is due.

    ``emit`` is called from the event loop's thread (sinks are not thread-safe); only
    the ``/proc`` reads happen in a worker thread. The caller cancels this task and
    emits the final `TreeSampler.record` itself.
    """
    loop = asyncio.get_running_loop()
    delays = iter(EARLY_DELAYS)
    emitted_peak = 0
    emitted_at = -float("inf")
    while True:
        await asyncio.to_thread(sampler.sample)
        now = loop.time()
        peak = sampler.peak_rss
        if peak > emitted_peak * (1 + growth) or (peak and now - emitted_at >= heartbeat):
            emit(sampler.record())
            emitted_peak, emitted_at = peak, now
        await asyncio.sleep(next(delays, interval))
