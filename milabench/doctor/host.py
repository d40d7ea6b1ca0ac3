"""The host's checks: CPU governor, steal, CPU pressure, other processes, memory, swap,
shared memory, disk.

Each check is a function of what /proc and sysfs say (read by `milabench.machine.procfs`)
returning its `Finding`s; `host_findings` runs them all, measuring CPU use over a short
sample with the doctor's own CPU time left out. The checks, their sources and their
thresholds: docs/doctor.md "The checks". Standard library only: it is sent to nodes
inline.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable, Sequence

from benchkit.hostmem import SHM_PATH, host_may_grow, shm_space
from milabench.doctor.findings import FAIL, OK, WARN, Finding, gib, pct
from milabench.doctor.thresholds import (
    DEFAULT_SAMPLE,
    DISK_FAIL_BYTES,
    DISK_WARN_BYTES,
    MEMORY_WARN_BYTES,
    MEMORY_WARN_FRACTION,
    OTHERS_WARN,
    PRESSURE_WARN,
    SHM_USED_WARN,
    SHM_WARN_BYTES,
    STEAL_WARN,
    SWAP_WARN_FRACTION,
)
from milabench.machine.procfs import (
    CLOCK_TICKS,
    HostUsage,
    command_label,
    host_snapshot,
    host_usage,
    own_ticks,
    parse_meminfo,
    parse_pressure,
    read_text,
)


def check_governor(root: str = "/sys/devices/system/cpu") -> Finding:
    """The cpufreq governor of every CPU: ``performance`` (or none exposed) is ok."""
    governors: dict[str, int] = {}
    try:
        names = sorted(os.listdir(root))
    except OSError:
        names = []
    for name in names:
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        text = read_text(f"{root}/{name}/cpufreq/scaling_governor")
        if text is not None and text.strip():
            governors[text.strip()] = governors.get(text.strip(), 0) + 1
    if not governors:
        return Finding(
            "cpu_governor",
            "host",
            OK,
            "no cpufreq governor exposed (a virtual machine, or clocks managed by firmware)",
        )
    total = sum(governors.values())
    slow = {g: n for g, n in governors.items() if g != "performance"}
    if not slow:
        return Finding("cpu_governor", "host", OK, f"performance on all {total} CPUs", governors)
    listed = ", ".join(f"{g} on {n}" for g, n in sorted(slow.items()))
    return Finding(
        "cpu_governor",
        "host",
        WARN,
        f"CPU governor {listed} of {total} CPUs: clocks follow the load, so short steps run "
        "slower and vary more (cpupower frequency-set -g performance)",
        governors,
    )


def busy_parts(usage: HostUsage, *, floor: float = 0.005) -> list[str]:
    """Where the other processes' CPU time went, in CPUs, parts that add up to
    ``usage.busy``: the busiest commands, the other commands together, the short-lived
    processes (born and gone during the sample: grouped by the parent that reaped them),
    and what no process accounts for (the kernel, processes not reaped yet). Parts below
    ``floor`` CPUs are left out (they round to 0.00)."""
    seconds = usage.seconds
    if seconds <= 0 or usage.busy is None:
        return []
    parts = [
        f"{command_label(comm, count)} {used / seconds:.2f}"
        for comm, count, used in usage.top
        if used / seconds >= floor
    ]
    if usage.named is None:  # the processes were not scanned: the busiest alone
        return parts
    listed = math.fsum(used for _, _, used in usage.top)
    rest = usage.named - listed
    more = usage.commands - len(usage.top)
    if more > 0 and rest / seconds >= floor:
        parts.append(f"{more} other command{'s' * (more > 1)} {rest / seconds:.2f}")
    short = math.fsum(used for _, used in usage.reaped)
    if short / seconds >= floor:
        named = [(comm, used) for comm, used in usage.reaped[:3] if used / seconds >= floor]
        parents = ", ".join(f"{comm} {used / seconds:.2f}" for comm, used in named)
        if len(named) < len(usage.reaped):
            parents += ", ..." if parents else "..."
        parts.append(f"short-lived processes {short / seconds:.2f} (reaped by {parents})")
    unseen = usage.busy - usage.named - short
    if unseen / seconds >= floor:
        parts.append(f"no process {unseen / seconds:.2f} (the kernel, processes not yet reaped)")
    return parts


def check_steal(usage: HostUsage) -> Finding:
    """The share of the CPU time the hypervisor gave to other guests over the sample."""
    span = f"over {usage.seconds:.1f} s"
    steal = usage.share(usage.steal)
    if steal is None:
        return Finding("steal", "host", OK, "/proc/stat unreadable: steal not measured")
    if steal >= STEAL_WARN:
        return Finding(
            "steal",
            "host",
            WARN,
            f"steal {pct(steal)} of the CPU time {span}: the hypervisor runs other "
            "guests on these CPUs; rates will dip when it does",
            round(steal, 4),
        )
    return Finding("steal", "host", OK, f"steal {pct(steal)} {span}", round(steal, 4))


def check_pressure(pressure_avg60: float | None) -> Finding:
    """CPU pressure: how long some task waited for a CPU over the last minute (PSI)."""
    if pressure_avg60 is None:
        return Finding("cpu_pressure", "host", OK, "no /proc/pressure/cpu (PSI off)")
    level = pressure_avg60 / 100.0
    words = f"some task waited for a CPU {pct(level)} of the last minute (PSI avg60)"
    return Finding(
        "cpu_pressure",
        "host",
        WARN if level >= PRESSURE_WARN else OK,
        words + (": the CPUs are oversubscribed" if level >= PRESSURE_WARN else ""),
        round(level, 4),
    )


def check_other_processes(usage: HostUsage) -> Finding:
    """Other processes' CPU use over the sample, and where it went (`busy_parts`)."""
    span = f"over {usage.seconds:.1f} s"
    others = usage.share(usage.busy)
    if others is None:
        return Finding("other_processes", "host", OK, "/proc/stat unreadable: not measured")
    cores = (usage.busy or 0.0) / usage.seconds if usage.seconds > 0 else 0.0
    text = f"other processes busy on {cores:.2f} of {usage.cpus} CPUs ({pct(others)}) {span}"
    parts = busy_parts(usage)
    if parts:
        text += f": {', '.join(parts)}"
    severity = WARN if others >= OTHERS_WARN else OK
    if severity == WARN:
        text += ": the benchmarks will share the CPUs with them"
    return Finding("other_processes", "host", severity, text, round(others, 4))


def host_cpu_findings(usage: HostUsage, pressure_avg60: float | None) -> list[Finding]:
    """Steal, CPU pressure and other processes' CPU use over a sample (`host_usage`)."""
    return [check_steal(usage), check_pressure(pressure_avg60), check_other_processes(usage)]


def check_swap(meminfo: dict[str, int], swap_pages: int | None) -> Finding:
    """Swap in motion during the check (pages in or out), or in use beyond a share of
    the RAM."""
    total = meminfo.get("MemTotal") or 0
    swap_total = meminfo.get("SwapTotal", 0)
    swap_used = swap_total - meminfo.get("SwapFree", swap_total)
    if not swap_total:
        return Finding("swap", "host", OK, "no swap", 0)
    if swap_pages:
        return Finding(
            "swap",
            "host",
            WARN,
            f"swapping: {swap_pages} pages in or out during the check "
            f"({gib(swap_used)} of swap in use): steps that touch swapped memory stall",
            swap_used,
        )
    if swap_used > SWAP_WARN_FRACTION * total:
        return Finding(
            "swap",
            "host",
            WARN,
            f"{gib(swap_used)} of swap in use (over {pct(SWAP_WARN_FRACTION)} of the "
            "RAM): memory is short",
            swap_used,
        )
    return Finding("swap", "host", OK, f"{gib(swap_used)} of swap in use", swap_used)


def check_memory(
    meminfo: dict[str, int], swap_pages: int | None, grows: str | None = None
) -> list[Finding]:
    """Available memory (``grows``: the device that can give this VM more than
    ``MemTotal``, `benchkit.hostmem.host_may_grow`, named in the reason), and swap in
    use or in motion (`check_swap`)."""
    total = meminfo.get("MemTotal")
    available = meminfo.get("MemAvailable", meminfo.get("MemFree"))
    if not total or available is None:
        return [Finding("memory", "host", OK, "/proc/meminfo unreadable: not checked")]
    low = available < MEMORY_WARN_BYTES and available < MEMORY_WARN_FRACTION * total
    memory = Finding(
        "memory",
        "host",
        WARN if low else OK,
        f"{gib(available)} available of {gib(total)}"
        + (f" ({grows} can give this VM more)" if grows else "")
        + (": benchmarks may be killed or swap" if low else ""),
        available,
    )
    return [memory, check_swap(meminfo, swap_pages)]


def check_shm(space: tuple[int, int] | None, path: str = SHM_PATH) -> Finding:
    """The shared memory DataLoader workers hand their batches through (``space``:
    /dev/shm's size and free bytes, None when there is none): small (a container's
    default 64 MiB), or mostly held by files already there."""
    fix = "docker run --shm-size=8g or --ipc=host; Kubernetes: an emptyDir of medium Memory"
    if space is None:
        text = f"no {path}: DataLoader workers cannot hand over their batches ({fix})"
        return Finding("shm", "host", WARN, text)
    size, free = space
    text = f"{path} {gib(size)}, {gib(free)} free"
    if size < SHM_WARN_BYTES:
        why = (
            ": loaders with workers prefetch less, or stop when one batch per worker does "
            f"not fit (the standard vision entries need 1.5 GiB per process at the least; {fix})"
        )
        return Finding("shm", "host", WARN, text + why, size)
    if size - free > SHM_USED_WARN * size:
        why = f": {pct((size - free) / size)} held by files there (left by stopped runs?)"
        return Finding("shm", "host", WARN, text + why, size)
    return Finding("shm", "host", OK, text, size)


def check_disk(path: str) -> Finding:
    """Free space where run folders and datasets go (the nearest existing folder)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        free = shutil.disk_usage(probe).free
    except OSError as err:
        return Finding("disk", f"disk {path}", WARN, f"cannot read free space: {err}")
    if free < DISK_FAIL_BYTES:
        severity, why = FAIL, ": run files and datasets will not fit; free some space"
    elif free < DISK_WARN_BYTES:
        severity, why = WARN, ": installs and datasets may not fit"
    else:
        severity, why = OK, ""
    return Finding("disk", f"disk {path}", severity, f"{gib(free)} free in {probe}{why}", free)


def host_findings(
    *,
    sample: float = DEFAULT_SAMPLE,
    paths: Sequence[str] = (),
    proc: str = "/proc",
    sys_cpu: str = "/sys/devices/system/cpu",
    sleep: Callable[[float], None] = time.sleep,
) -> list[Finding]:
    """Every host check; CPU use is measured over ``sample`` seconds (this process and
    its threads excluded: the doctor is not a neighbour)."""
    me = os.getpid()
    mine_before = own_ticks([me], proc)
    before = host_snapshot(processes=True, proc=proc)
    sleep(max(sample, 0.05))
    after = host_snapshot(processes=True, proc=proc)
    mine = (own_ticks([me], proc) - mine_before) / CLOCK_TICKS
    usage = host_usage(before, after, exclude=[me])
    if usage.busy is not None:
        usage.busy = max(usage.busy - mine, 0.0)
    text = read_text(f"{proc}/pressure/cpu")
    avg60 = parse_pressure(text).get("some", {}).get("avg60") if text is not None else None
    out = [check_governor(sys_cpu)]
    out += host_cpu_findings(usage, avg60)
    meminfo = parse_meminfo(read_text(f"{proc}/meminfo") or "")
    out += check_memory(meminfo, usage.swap_pages, host_may_grow())
    out.append(check_shm(shm_space()))
    out += [check_disk(p) for p in paths]
    return out
