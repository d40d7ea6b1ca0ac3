"""What the rest of the host did while a benchmark ran: other processes, steal, pressure.

While the local processes of one benchmark run, `InterferenceWatch` samples the host
about once a second (`run.memory_interval`; 0: off) and hands every process of the
benchmark the same ``interference`` ``data`` record; ``pressure``, ``steal`` and ``top``
are absent where the kernel does not expose them. The benchmark's share is its process
trees (`memory.tree_pids`, plus the descendants the launcher's tracker saw leave).
``top`` costs two scans `TOP_GAP` apart, made only when others used at least `TOP_SHARE`
of the CPUs. Reads run in a worker thread; records are emitted from the event loop
(sinks are not thread-safe). Remote (SSH) processes are not watched. Nothing here
raises: a missing file or a vanished process just drops out of a sample. The record and
how the report reads it: docs/doctor.md "Interference during the window".
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from milabench.execute import memory
from milabench.machine import procfs

TOP_SHARE = 0.10  # other processes busy on 10% of the CPUs: worth naming them
TOP_GAP = 0.2  # seconds between the two scans that name them
TOP_COUNT = 5


class InterferenceSampler:
    """Host CPU use split into the benchmark's, milabench's and everyone else's.

    `sample(roots)` returns the record payload for the interval since the previous call
    (None on the first call, which only sets the baseline). ``roots`` are the leader
    pids of the benchmark's local processes, ``extra`` the other pids that belong to it.
    """

    def __init__(self, proc: str = "/proc", *, scan_gap: float = TOP_GAP) -> None:
        self.proc = proc
        self.scan_gap = scan_gap
        self.me = os.getpid()
        self._host: procfs.HostSnapshot | None = None
        self._self_ticks = 0
        # pid -> (ppid, own ticks, reaped children's ticks) at the previous sample
        self._tree: dict[int, tuple[int, int, int]] = {}

    def _tree_now(self, pids: Iterable[int]) -> dict[int, tuple[int, int, int]]:
        out = {}
        for pid in pids:
            found = procfs.read_pid_stat(pid, self.proc)
            if found is not None:
                out[pid] = (found.ppid, found.ticks, found.cutime + found.cstime)
        return out

    def _bench_ticks(self, now: dict[int, tuple[int, int, int]]) -> int:
        """CPU ticks the trees used since the previous sample (see the module docstring)."""
        used = 0
        for pid, (_, own, kids) in now.items():
            prev = self._tree.get(pid)
            if prev is None:
                used += own + kids
            else:
                used += max(own - prev[1], 0) + max(kids - prev[2], 0)
        for pid, (ppid, own, kids) in self._tree.items():
            if pid not in now and ppid in now:
                used -= own + kids  # counted while alive, counted again in the parent
        return max(used, 0)

    def _self(self) -> int:
        found = procfs.read_pid_stat(self.me, self.proc)
        return found.ticks if found is not None else self._self_ticks

    def top_others(self, exclude: set[int]) -> list[list[Any]]:
        """The busiest commands outside ``exclude`` right now: ``[name, processes, CPUs]``."""
        first = procfs.host_snapshot(processes=True, proc=self.proc)
        time.sleep(self.scan_gap)
        second = procfs.host_snapshot(processes=True, proc=self.proc)
        usage = procfs.host_usage(first, second, exclude=exclude, top=TOP_COUNT)
        span = usage.seconds or self.scan_gap
        return [[comm, count, round(used / span, 3)] for comm, count, used in usage.top]

    def sample(self, roots: Iterable[int], extra: Iterable[int] = ()) -> dict[str, Any] | None:
        pids: list[int] = []
        seen: set[int] = set()
        for root in roots:
            for pid in memory.tree_pids(root):
                if pid not in seen:
                    seen.add(pid)
                    pids.append(pid)
        for pid in extra:
            if pid not in seen:
                seen.add(pid)
                pids.append(pid)
        host = procfs.host_snapshot(proc=self.proc)
        tree = self._tree_now(pids)
        self_ticks = self._self()
        previous = self._host
        bench = self._bench_ticks(tree) if previous is not None else 0
        mine = max(self_ticks - self._self_ticks, 0)
        self._host, self._tree, self._self_ticks = host, tree, self_ticks
        if previous is None:
            return None
        usage = procfs.host_usage(previous, host)
        if usage.seconds <= 0:
            return None
        tick = procfs.CLOCK_TICKS
        record: dict[str, Any] = {
            "seconds": round(usage.seconds, 4),
            "cpus": usage.cpus,
            "bench": round(bench / tick, 4),
            "self": round(mine / tick, 4),
        }
        if usage.busy is not None:
            others = max(usage.busy - (bench + mine) / tick, 0.0)
            record["busy"] = round(usage.busy, 4)
            record["others"] = round(others, 4)
            if usage.steal is not None:
                record["steal"] = round(usage.steal, 4)
            if others >= TOP_SHARE * usage.capacity:
                record["top"] = self.top_others(seen | {self.me})
        if usage.pressure is not None:
            record["pressure"] = round(usage.pressure, 4)
        return record


class InterferenceWatch:
    """One sampler for all the local processes of one benchmark (they run together, so
    one process's siblings are not interference): `add` each process with its emitter,
    `remove` it when it ends; `run` samples until cancelled and gives each record to
    every process still running."""

    def __init__(
        self, interval: float = memory.INTERVAL, sampler: InterferenceSampler | None = None
    ) -> None:
        self.interval = interval
        self.sampler = sampler or InterferenceSampler()
        self.members: dict[str, tuple[int, Callable[[], Iterable[Any]], Callable]] = {}

    def add(
        self, tag: str, pid: int, emit: Callable, extra: Callable[[], Iterable[Any]] = list
    ) -> None:
        """Watch ``pid``'s tree (and the processes ``extra()`` returns: objects with a
        ``pid``) for the benchmark; records go to ``emit("data", record, "data")``."""
        self.members[tag] = (pid, extra, emit)

    def remove(self, tag: str) -> None:
        self.members.pop(tag, None)

    def _extra_pids(self) -> list[int]:
        out = []
        for _, extra, _ in list(self.members.values()):
            try:
                out += [p.pid for p in extra()]
            except Exception:  # a tracker being torn down must not break sampling
                continue
        return out

    async def run(self) -> None:
        while True:
            if self.members:
                roots = [pid for pid, _, _ in self.members.values()]
                extra = self._extra_pids()
                try:
                    payload = await asyncio.to_thread(self.sampler.sample, roots, extra)
                except Exception:  # an observer never ends a benchmark
                    payload = None
                if payload is not None:
                    record = {"task": "main", "time": time.time(), "interference": payload}
                    for _, _, emit in list(self.members.values()):
                        emit("data", record, "data")
            await asyncio.sleep(self.interval)
