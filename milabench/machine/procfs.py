"""The host's /proc files read as numbers: parsers, one process's counters, CPU use.

The parsers are pure functions of a file's text (`parse_proc_stat`, `parse_pressure`,
`parse_meminfo`, `parse_vmstat`, `parse_pid_stat`); `host_snapshot` reads the counters
once, `host_usage` turns two snapshots into CPU-seconds (busy, steal, pressure, swap) and
names the busiest commands. The doctor's host checks (`milabench.doctor.host`) and the
runner's interference sampler (`milabench.execute.interference`) both read /proc here,
so each file is read one way only. A missing file (an older kernel, PSI off, a container)
reads as None, never as an error. Standard library only: it is sent to nodes inline.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple


class CpuTimes(NamedTuple):
    """The aggregate ``cpu`` line of /proc/stat, in clock ticks (guest time is already
    counted in user time, so it is not added again)."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def busy(self) -> int:
        """Ticks spent running something (not idle, not waiting for I/O, not stolen)."""
        return self.user + self.nice + self.system + self.irq + self.softirq

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.iowait + self.steal


def parse_proc_stat(text: str) -> tuple[CpuTimes, int]:
    """``/proc/stat`` -> (aggregate CPU times, number of ``cpuN`` lines).

    Raises ValueError when the aggregate line is missing or malformed."""
    times: CpuTimes | None = None
    cpus = 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(x) for x in line.split()[1:]]
            fields += [0] * (8 - len(fields))
            times = CpuTimes(*fields[:8])
        elif line.startswith("cpu") and line[3:4].isdigit():
            cpus += 1
    if times is None:
        raise ValueError("/proc/stat has no aggregate 'cpu' line")
    return times, max(cpus, 1)


def parse_pressure(text: str) -> dict[str, dict[str, float]]:
    """``/proc/pressure/cpu`` (PSI) -> ``{"some": {"avg10", "avg60", "avg300", "total"}}``
    (and ``full`` when present). ``avg*`` are percentages, ``total`` microseconds."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0] not in ("some", "full"):
            continue
        values = {}
        for item in parts[1:]:
            key, _, raw = item.partition("=")
            try:
                values[key] = float(raw)
            except ValueError:
                continue
        out[parts[0]] = values
    return out


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> ``{name: bytes}`` (values given in kB are converted)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[name.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def parse_vmstat(text: str) -> dict[str, int]:
    """``/proc/vmstat`` -> ``{counter: value}``."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


class PidStat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` the samplers need (times in clock ticks)."""

    comm: str
    state: str
    ppid: int
    utime: int
    stime: int
    cutime: int
    cstime: int

    @property
    def ticks(self) -> int:
        """CPU time of the process itself (all its threads)."""
        return self.utime + self.stime

    @property
    def ticks_with_children(self) -> int:
        """Its own CPU time plus that of the children it has reaped."""
        return self.utime + self.stime + self.cutime + self.cstime


def parse_pid_stat(text: str) -> PidStat:
    """``/proc/<pid>/stat`` -> `PidStat`. The command name sits between the first ``(``
    and the *last* ``)``: it may itself contain spaces and parentheses."""
    head, _, rest = text.rpartition(")")
    comm = head.partition("(")[2]
    fields = rest.split()
    if len(fields) < 15:
        raise ValueError("/proc/<pid>/stat: too few fields")
    return PidStat(
        comm=comm,
        state=fields[0],
        ppid=int(fields[1]),
        utime=int(fields[11]),
        stime=int(fields[12]),
        cutime=int(fields[13]),
        cstime=int(fields[14]),
    )


def read_text(path: str) -> str | None:
    """A small file's text, or None when it does not exist or cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_pid_stat(pid: int, proc: str = "/proc") -> PidStat | None:
    text = read_text(f"{proc}/{pid}/stat")
    if text is None:
        return None
    try:
        return parse_pid_stat(text)
    except (ValueError, IndexError):
        return None


def scan_processes(proc: str = "/proc") -> dict[int, tuple[str, int, int]]:
    """``{pid: (command name, CPU ticks, CPU ticks of the children it reaped)}`` of every
    process (vanished ones left out).

    Costs one small read per process: the samplers call it only when other processes
    are busy enough to be worth naming."""
    out: dict[int, tuple[str, int]] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        found = read_pid_stat(int(name), proc)
        if found is not None:
            out[int(name)] = (found.comm, found.ticks, found.cutime + found.cstime)
    return out


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class HostSnapshot:
    """One look at the host's CPU counters (see `host_snapshot`)."""

    time: float  # time.monotonic()
    cpu: CpuTimes | None
    cpus: int
    pressure_us: float | None  # PSI cpu "some" total, microseconds
    swap_pages: int | None  # pswpin + pswpout
    processes: dict[int, tuple[str, int, int]] | None = None  # `scan_processes`, if asked


def host_snapshot(*, processes: bool = False, proc: str = "/proc") -> HostSnapshot:
    """The counters of /proc/stat, /proc/pressure/cpu and /proc/vmstat now (None for a
    file that is missing: an older kernel, PSI off, a container without them)."""
    now = time.monotonic()
    cpu, cpus = None, os.cpu_count() or 1
    text = read_text(f"{proc}/stat")
    if text is not None:
        try:
            cpu, cpus = parse_proc_stat(text)
        except ValueError:
            cpu = None
    pressure = None
    text = read_text(f"{proc}/pressure/cpu")
    if text is not None:
        pressure = parse_pressure(text).get("some", {}).get("total")
    swap = None
    text = read_text(f"{proc}/vmstat")
    if text is not None:
        vm = parse_vmstat(text)
        if "pswpin" in vm or "pswpout" in vm:
            swap = vm.get("pswpin", 0) + vm.get("pswpout", 0)
    return HostSnapshot(
        time=now,
        cpu=cpu,
        cpus=cpus,
        pressure_us=pressure,
        swap_pages=swap,
        processes=scan_processes(proc) if processes else None,
    )


@dataclass
class HostUsage:
    """What happened on the host between two snapshots. CPU figures are in CPU-seconds;
    ``capacity`` = ``seconds x cpus``; shares are fractions of it."""

    seconds: float
    cpus: int
    busy: float | None = None
    steal: float | None = None
    pressure: float | None = None  # seconds with some task waiting for a CPU
    swap_pages: int | None = None
    # (command name, processes, CPU-seconds) of the busiest commands (their processes
    # summed: a neighbour's eight workers are one line), when both snapshots scanned
    top: list[tuple[str, int, float]] = field(default_factory=list)
    # When both snapshots scanned, where ``busy`` went (`host_usage`): every command seen
    # at the end (`top` are the first of them), and the short-lived processes, gone before
    # the end: their time is known from the parents that reaped them.
    named: float | None = None  # CPU-seconds of every process seen at the end
    commands: int = 0  # command names behind `named`
    reaped: list[tuple[str, float]] = field(default_factory=list)  # (parent, CPU-seconds)

    @property
    def capacity(self) -> float:
        return self.seconds * self.cpus

    def share(self, cpu_seconds: float | None) -> float | None:
        if cpu_seconds is None or self.capacity <= 0:
            return None
        return max(0.0, cpu_seconds / self.capacity)


def host_usage(
    before: HostSnapshot, after: HostSnapshot, *, exclude: Iterable[int] = (), top: int = 3
) -> HostUsage:
    """The host's CPU use between two snapshots; ``exclude``: pids left out of ``top``
    (the busiest ``top`` command names, each with its processes' CPU time summed).

    Accounted for: the processes seen at the end (one born during the sample counts its
    whole life, all of it inside the sample), and the short-lived ones, born and gone in
    between, whose time their parent's counters of reaped children gained (grouped by
    the parent's name); what is left of ``busy`` is the kernel's and that of processes
    whose parent has not reaped them yet (`HostUsage`)."""
    usage = HostUsage(seconds=max(after.time - before.time, 0.0), cpus=after.cpus)
    if before.cpu is not None and after.cpu is not None:
        usage.busy = max(after.cpu.busy - before.cpu.busy, 0) / CLOCK_TICKS
        usage.steal = max(after.cpu.steal - before.cpu.steal, 0) / CLOCK_TICKS
    if before.pressure_us is not None and after.pressure_us is not None:
        usage.pressure = max(after.pressure_us - before.pressure_us, 0.0) / 1e6
    if before.swap_pages is not None and after.swap_pages is not None:
        usage.swap_pages = max(after.swap_pages - before.swap_pages, 0)
    if before.processes is not None and after.processes is not None:
        skip = set(exclude)
        by_name: dict[str, list[float]] = {}
        reaped: dict[str, float] = {}
        for pid, (comm, ticks, children) in after.processes.items():
            if pid in skip:
                continue
            prev = before.processes.get(pid)
            if prev is None or ticks < prev[1]:  # born during the sample: its whole life
                prev = (comm, 0, 0)  # lies inside it (its children's too)
            used = (ticks - prev[1]) / CLOCK_TICKS
            if used > 0:
                by_name.setdefault(comm, []).append(used)
            gone = (children - prev[2]) / CLOCK_TICKS
            if gone > 0:
                reaped[comm] = reaped.get(comm, 0.0) + gone
        ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
        usage.top = [(comm, len(used), sum(used)) for comm, used in ranked[:top]]
        usage.named = math.fsum(math.fsum(used) for used in by_name.values())
        usage.commands = len(by_name)
        usage.reaped = sorted(reaped.items(), key=lambda kv: -kv[1])
    return usage


def command_label(comm: str, processes: int) -> str:
    """``python (3 processes)``, or the name alone for one process."""
    return comm if processes == 1 else f"{comm} ({processes} processes)"


def own_ticks(pids: Iterable[int], proc: str = "/proc") -> int:
    """CPU ticks of ``pids`` (with their reaped children's), 0 for a vanished one."""
    total = 0
    for pid in pids:
        found = read_pid_stat(pid, proc)
        if found is not None:
            total += found.ticks_with_children
    return total
