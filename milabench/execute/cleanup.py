"""Finding and killing every process a benchmark started, including escaped ones.

A benchmark runs in its own session/process group, so one ``killpg`` reaches most of
its processes. Three kinds escape it: a descendant that called ``setsid``/``setpgid``,
one that ignores SIGTERM, and one whose parent died before we saw it. They are caught by
(1) periodic snapshots of the leader's descendants (`ProcessTracker`), and (2) a token
variable put in the benchmark's environment, which every descendant inherits: at stop
time, any process of ours whose environment carries the token is killed as well.
"""

from __future__ import annotations

import asyncio
import os
import signal

import psutil

TOKEN_VAR = "MILABENCH_PROCESS_TOKEN"


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (pid reuse safe: psutil checks the creation time)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def token_processes(token: str) -> list[psutil.Process]:
    """Processes of this user whose environment holds ``TOKEN_VAR=token``."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    me = os.getpid()
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read():
                    found.append(psutil.Process(pid))
        except (OSError, psutil.Error):
            continue
    return found


def group_members(pgid: int) -> list[psutil.Process]:
    """Living processes of process group ``pgid`` (zombies left out)."""
    if not group_exists(pgid):
        return []
    out = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                proc = psutil.Process(pid)
                if alive(proc):
                    out.append(proc)
        except (OSError, psutil.Error):
            continue
    return out


class ProcessTracker:
    """Remembers every descendant of a leader seen while it runs (pid reuse safe)."""

    def __init__(self, pid: int, token: str | None = None) -> None:
        self.pid = pid
        self.pgid = pid
        self.token = token
        self.known: dict[int, psutil.Process] = {}
        try:
            self.leader: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self.leader = None

    def snapshot(self) -> None:
        if self.leader is None:
            return
        try:
            children = self.leader.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            self.known.setdefault(child.pid, child)

    async def watch(self, interval: float = 0.5) -> None:
        """Snapshot soon after start (fast forks), then every ``interval`` seconds."""
        for delay in (0.02, 0.05, 0.1, 0.2):
            self.snapshot()
            await asyncio.sleep(delay)
        while True:
            self.snapshot()
            await asyncio.sleep(interval)

    def survivors(self, *, scan: bool = True) -> list[psutil.Process]:
        """Every living process that belongs to the benchmark (leader excluded)."""
        self.snapshot()
        found: dict[int, psutil.Process] = {}
        for proc in self.known.values():
            if alive(proc):
                found[proc.pid] = proc
        for proc in group_members(self.pgid):
            found.setdefault(proc.pid, proc)
        if scan and self.token:
            for proc in token_processes(self.token):
                if alive(proc):
                    found.setdefault(proc.pid, proc)
        found.pop(self.pid, None)
        found.pop(os.getpid(), None)
        return list(found.values())

    def signal_all(self, sig: int, procs: list[psutil.Process]) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass

    async def wait_gone(self, procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
        """Poll (finely: this is on the critical path between benchmarks) until all exit."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 0.002
        living = [p for p in procs if alive(p)]
        while living and loop.time() < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
            living = [p for p in living if alive(p)]
        return living

    async def kill_survivors(self, grace: float) -> int:
        """SIGTERM every survivor, SIGKILL what is left after ``grace``; returns the count."""
        procs = self.survivors()
        if not procs:
            return 0
        self.signal_all(signal.SIGTERM, procs)
        living = await self.wait_gone(procs, grace)
        procs = {p.pid: p for p in living}
        for p in self.survivors():
            procs.setdefault(p.pid, p)
        if procs:
            self.signal_all(signal.SIGKILL, list(procs.values()))
            await self.wait_gone(list(procs.values()), 2.0)
        return len(procs)
