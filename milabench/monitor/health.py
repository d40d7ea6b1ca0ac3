"""Machine health: the findings of `milabench doctor`, and the /proc readings behind them.

Each fact of the machine that can make a node measure below its peers (a power limit
below the default, a PCIe link trained narrower than it can, clock-event reasons, ECC
errors, persistence mode, the CPU governor, other processes, steal, memory, swap, disk)
becomes one `Finding` with a severity:

* ``ok``: as expected (the reason says what was seen);
* ``warn``: results may be slower or noisier than the hardware allows, or not comparable
  with other machines; the run goes on and the warning is recorded;
* ``fail``: the results would not describe this hardware; `milabench run` refuses to
  start unless ``--ignore-doctor``.

Sources: /proc and sysfs for the host and for AMD and Intel GPUs, NVML (``pynvml``) for
NVIDIA, the interpreter's imports (`NODE_MODULES`) for a node that runs milabench. One
file, standard library only (and `benchkit.accelerators` for the fake GPUs, sent with it:
`SHIPPED_MODULES`), so that `probe_argv` can send it inline to a node's Python before
anything is copied. Every check, its source and its thresholds:
docs/doctor.md "The checks"; why inline: docs/doctor.md "On every node".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from benchkit.accelerators import AcceleratorSettingError, fake_gpus

#: What this file imports beyond the standard library, sent with it to a node.
SHIPPED_MODULES = ("benchkit.smi", "benchkit.accelerators")

OK = "ok"
WARN = "warn"
FAIL = "fail"
SEVERITIES = (OK, WARN, FAIL)
RESULT_PREFIX = "@milabench-doctor "

# Seconds over which steal, pressure and other processes' CPU use are measured.
DEFAULT_SAMPLE = 0.5
# Host thresholds (fractions of the CPU capacity or of the sample's time).
STEAL_WARN = 0.05  # a VM whose vCPUs wait for the hypervisor 5% of the time
PRESSURE_WARN = 0.25  # PSI "some" avg60: a quarter of the last minute with tasks waiting
OTHERS_WARN = 0.25  # other processes busy on a quarter of the CPUs
MEMORY_WARN_BYTES = 1 << 30  # less than 1 GiB available ...
MEMORY_WARN_FRACTION = 0.05  # ... and less than 5% of the RAM
SWAP_WARN_FRACTION = 0.10  # swap in use above 10% of the RAM
DISK_FAIL_BYTES = 1 << 30  # the run folder and datasets cannot fit
DISK_WARN_BYTES = 5 << 30
# GPU thresholds.
POWER_LIMIT_FAIL = 0.95  # enforced limit below 95% of the default: a capped GPU
POWER_LIMIT_HIGH = 1.05  # above the default: raised by hand, not comparable either
TEMPERATURE_MARGIN = 15.0  # degrees C below the slowdown threshold, at rest
RETIRED_PAGES_WARN = 60  # DBE + multiple-SBE retired pages (the usual RMA threshold)

# What `python -m milabench install|prepare|run` imports on a node (import name, the
# distribution that provides it). `uv` or `virtualenv` is enough for install (uv is the
# fast path, virtualenv + pip the fallback). asyncssh is needed only on the machine that
# reaches other nodes; voir, ptera and nvidia-ml-py only inside benchmark environments.
NODE_MODULES = (
    ("yaml", "PyYAML"),
    ("omegaconf", "omegaconf"),
    ("psutil", "psutil"),
    ("blessed", "blessed"),
)
NODE_INSTALLERS = (("uv", "uv"), ("virtualenv", "virtualenv"))

# NVML clock-event ("throttle") reasons: bit value -> (name, severity at rest). The bit
# values are NVML's (nvmlClocksEventReason* in nvidia-ml-py); `clock_event_names`
# prefers the installed module's constants and falls back to these.
CLOCK_EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
_CLOCK_EVENT_CONSTANTS = {
    "gpu_idle": "GpuIdle",
    "applications_clocks_setting": "ApplicationsClocksSetting",
    "sw_power_cap": "SwPowerCap",
    "hw_slowdown": "HwSlowdown",
    "sync_boost": "SyncBoost",
    "sw_thermal_slowdown": "SwThermalSlowdown",
    "hw_thermal_slowdown": "HwThermalSlowdown",
    "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
    "display_clock_setting": "DisplayClockSetting",
}
CLOCK_EVENT_SEVERITY = {
    "hw_slowdown": FAIL,
    "hw_thermal_slowdown": FAIL,
    "hw_power_brake_slowdown": FAIL,
    "sw_thermal_slowdown": WARN,
    "sw_power_cap": WARN,
}


@dataclass
class Finding:
    """One fact about the machine: ``check`` (what was looked at), ``subject`` (``host``,
    ``gpu3``, ``disk /data``, ``python``), ``severity`` (ok, warn, fail), ``reason`` (one
    line for a person) and ``value`` (the measured value, JSON-able, for comparisons)."""

    check: str
    subject: str
    severity: str
    reason: str
    value: Any = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        """A finding read back from JSON (unknown severities become ``warn``)."""
        severity = str(data.get("severity") or WARN)
        return cls(
            check=str(data.get("check") or "?"),
            subject=str(data.get("subject") or "host"),
            severity=severity if severity in SEVERITIES else WARN,
            reason=str(data.get("reason") or ""),
            value=data.get("value"),
        )


def worst(findings: Iterable[Finding]) -> str:
    """The highest severity of ``findings`` (``ok`` for none)."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return max((f.severity for f in findings), key=lambda s: rank.get(s, 1), default=OK)


def failures(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == FAIL]


# -- /proc readers (pure functions of the files' text) -----------------------------------


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


# -- host checks -------------------------------------------------------------------------


def _pct(fraction: float) -> str:
    value = 100.0 * fraction
    return f"{value:.0f}%" if value >= 10 else f"{value:.1f}%"


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


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


def host_cpu_findings(usage: HostUsage, pressure_avg60: float | None) -> list[Finding]:
    """Steal, CPU pressure and other processes' CPU use over a sample (`host_usage`)."""
    out: list[Finding] = []
    span = f"over {usage.seconds:.1f} s"
    steal = usage.share(usage.steal)
    if steal is None:
        out.append(Finding("steal", "host", OK, "/proc/stat unreadable: steal not measured"))
    elif steal >= STEAL_WARN:
        out.append(
            Finding(
                "steal",
                "host",
                WARN,
                f"steal {_pct(steal)} of the CPU time {span}: the hypervisor runs other "
                "guests on these CPUs; rates will dip when it does",
                round(steal, 4),
            )
        )
    else:
        out.append(Finding("steal", "host", OK, f"steal {_pct(steal)} {span}", round(steal, 4)))
    if pressure_avg60 is None:
        out.append(Finding("cpu_pressure", "host", OK, "no /proc/pressure/cpu (PSI off)"))
    else:
        level = pressure_avg60 / 100.0
        words = f"some task waited for a CPU {_pct(level)} of the last minute (PSI avg60)"
        out.append(
            Finding(
                "cpu_pressure",
                "host",
                WARN if level >= PRESSURE_WARN else OK,
                words + (": the CPUs are oversubscribed" if level >= PRESSURE_WARN else ""),
                round(level, 4),
            )
        )
    others = usage.share(usage.busy)
    if others is None:
        out.append(Finding("other_processes", "host", OK, "/proc/stat unreadable: not measured"))
    else:
        cores = (usage.busy or 0.0) / usage.seconds if usage.seconds > 0 else 0.0
        text = f"other processes busy on {cores:.2f} of {usage.cpus} CPUs ({_pct(others)}) {span}"
        parts = busy_parts(usage)
        if parts:
            text += f": {', '.join(parts)}"
        severity = WARN if others >= OTHERS_WARN else OK
        if severity == WARN:
            text += ": the benchmarks will share the CPUs with them"
        out.append(Finding("other_processes", "host", severity, text, round(others, 4)))
    return out


def check_memory(meminfo: dict[str, int], swap_pages: int | None) -> list[Finding]:
    """Available memory, and swap in use or in motion."""
    out: list[Finding] = []
    total = meminfo.get("MemTotal")
    available = meminfo.get("MemAvailable", meminfo.get("MemFree"))
    if not total or available is None:
        return [Finding("memory", "host", OK, "/proc/meminfo unreadable: not checked")]
    low = available < MEMORY_WARN_BYTES and available < MEMORY_WARN_FRACTION * total
    out.append(
        Finding(
            "memory",
            "host",
            WARN if low else OK,
            f"{_gib(available)} available of {_gib(total)}"
            + (": benchmarks may be killed or swap" if low else ""),
            available,
        )
    )
    swap_total = meminfo.get("SwapTotal", 0)
    swap_used = swap_total - meminfo.get("SwapFree", swap_total)
    if not swap_total:
        out.append(Finding("swap", "host", OK, "no swap", 0))
    elif swap_pages:
        out.append(
            Finding(
                "swap",
                "host",
                WARN,
                f"swapping: {swap_pages} pages in or out during the check "
                f"({_gib(swap_used)} of swap in use): steps that touch swapped memory stall",
                swap_used,
            )
        )
    elif swap_used > SWAP_WARN_FRACTION * total:
        out.append(
            Finding(
                "swap",
                "host",
                WARN,
                f"{_gib(swap_used)} of swap in use (over {_pct(SWAP_WARN_FRACTION)} of the "
                "RAM): memory is short",
                swap_used,
            )
        )
    else:
        out.append(Finding("swap", "host", OK, f"{_gib(swap_used)} of swap in use", swap_used))
    return out


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
    return Finding("disk", f"disk {path}", severity, f"{_gib(free)} free in {probe}{why}", free)


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
    out += check_memory(parse_meminfo(read_text(f"{proc}/meminfo") or ""), usage.swap_pages)
    out += [check_disk(p) for p in paths]
    return out


# -- the interpreter ---------------------------------------------------------------------


def check_modules(
    modules: Sequence[tuple[str, str]] = NODE_MODULES,
    installers: Sequence[tuple[str, str]] = NODE_INSTALLERS,
    *,
    python_hint: str = "--node-python PATH or the fleet.python option",
    importer: Callable[[str], Any] | None = None,
) -> Finding:
    """Can this interpreter import what milabench needs? One finding naming the first
    missing module, its distribution, and how to point at another Python."""
    import importlib

    load = importer or importlib.import_module
    missing: list[tuple[str, str, str]] = []
    for module, dist in modules:
        try:
            load(module)
        except Exception as err:  # noqa: BLE001 - an import that raises is as bad as absent
            missing.append((module, dist, f"{type(err).__name__}: {err}"))
    have_installer = False
    for module, _ in installers:
        try:
            load(module)
            have_installer = True
            break
        except Exception:  # noqa: BLE001
            continue
    exe = sys.executable or "python"
    if not have_installer and installers:
        names = " or ".join(dist for _, dist in installers)
        missing.append((names, names, "neither can be imported"))
    if not missing:
        names = ", ".join(m for m, _ in modules)
        return Finding("python_modules", "python", OK, f"{exe} imports {names}", exe)
    module, dist, detail = missing[0]
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    dists = " ".join(sorted({d for _, d, _ in missing}))
    return Finding(
        "python_modules",
        "python",
        FAIL,
        f"{exe} cannot import {module} ({detail}){more}, which milabench needs: "
        f"pip install {dists} for it, or point at another interpreter with {python_hint}",
        [m for m, _, _ in missing],
    )


# -- NVIDIA (NVML) -----------------------------------------------------------------------


def clock_event_names(mask: int, nvml: Any = None) -> list[str]:
    """The names of the clock-event reasons set in ``mask`` (NVML's bit values; the
    installed module's ``nvmlClocksEventReason*`` constants when it has them)."""
    bits = dict(CLOCK_EVENT_BITS)
    if nvml is not None:
        for name, suffix in _CLOCK_EVENT_CONSTANTS.items():
            for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
                value = getattr(nvml, prefix + suffix, None)
                if isinstance(value, int) and value:
                    bits = {b: n for b, n in bits.items() if n != name}
                    bits[value] = name
                    break
    return [name for bit, name in sorted(bits.items()) if mask & bit]


def _visible_indexes(count: int, environ: dict[str, str] | None = None) -> list[int] | None:
    """Physical indexes ``CUDA_VISIBLE_DEVICES`` selects, None when it names UUIDs or is
    unset (then every device is checked)."""
    env = os.environ if environ is None else environ
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    out = []
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        if not item.isdigit():
            return None
        if int(item) >= count:
            break
        out.append(int(item))
    return out


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``; None when the function is absent or not supported."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def _nvml_device_findings(nvml: Any, handle: Any, subject: str) -> list[Finding]:
    out: list[Finding] = []

    def add(check: str, severity: str, reason: str, value: Any = None) -> None:
        out.append(Finding(check, subject, severity, reason, value))

    mode = _call(nvml, "nvmlDeviceGetPersistenceMode", handle)
    if mode is not None:
        if mode:
            add("persistence_mode", OK, "persistence mode on", True)
        else:
            add(
                "persistence_mode",
                WARN,
                "persistence mode off: the driver sets the GPU up again for every process "
                "(slower starts, first steps vary); nvidia-smi -pm 1",
                False,
            )
    limit = _call(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    if limit is None:
        limit = _call(nvml, "nvmlDeviceGetPowerManagementLimit", handle)
    default = _call(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle)
    if limit and default:
        ratio = limit / default
        watts, dwatts = limit / 1000, default / 1000
        value = {"limit_w": watts, "default_w": dwatts}
        if ratio < POWER_LIMIT_FAIL:
            add(
                "power_limit",
                FAIL,
                f"power limit {watts:.0f} W is {_pct(ratio)} of the default {dwatts:.0f} W: "
                f"the GPU is capped and will measure slower (nvidia-smi -pl {dwatts:.0f})",
                value,
            )
        elif ratio > POWER_LIMIT_HIGH:
            add(
                "power_limit",
                WARN,
                f"power limit {watts:.0f} W is above the default {dwatts:.0f} W: results are "
                "not comparable with stock GPUs",
                value,
            )
        else:
            add("power_limit", OK, f"power limit {watts:.0f} W (default {dwatts:.0f} W)", value)
    reasons = _call(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = _call(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if reasons is not None:
        names = clock_event_names(int(reasons), nvml)
        bad = [n for n in names if n in CLOCK_EVENT_SEVERITY]
        if bad:
            severity = FAIL if any(CLOCK_EVENT_SEVERITY[n] == FAIL for n in bad) else WARN
            add(
                "clock_events",
                severity,
                f"clocks held down now by {', '.join(bad)} (at rest): check cooling and "
                "power delivery (nvidia-smi -q -d PERFORMANCE)",
                names,
            )
        else:
            add("clock_events", OK, "no slowdown (" + (", ".join(names) or "none") + ")", names)
    gen = _call(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle)
    width = _call(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle)
    max_gen = _call(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle)
    max_width = _call(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle)
    if width and max_width:
        value = {"gen": gen, "width": width, "max_gen": max_gen, "max_width": max_width}
        link = f"PCIe gen {gen} x{width}"
        if width < max_width:
            add(
                "pcie_link",
                WARN,
                f"{link}, the GPU and slot allow x{max_width}: host-device copies run at "
                f"{width / max_width:.0%} of their bandwidth (reseat the card, check the slot)",
                value,
            )
        elif gen and max_gen and gen < max_gen:
            add(
                "pcie_link",
                OK,
                f"{link} (gen {max_gen} possible: an idle GPU lowers its link speed)",
                value,
            )
        else:
            add("pcie_link", OK, f"{link}", value)
    ecc = _call(nvml, "nvmlDeviceGetEccMode", handle)
    if ecc is not None:
        current, pending = int(ecc[0]), int(ecc[1])
        if current != pending:
            add(
                "ecc_mode",
                WARN,
                f"ECC {'on' if current else 'off'} now, {'on' if pending else 'off'} after the "
                "next reset: reset the GPU before measuring",
                {"current": current, "pending": pending},
            )
        elif not current:
            add(
                "ecc_mode",
                WARN,
                "ECC off: more memory and bandwidth than the same GPU with ECC on, so results "
                "are not comparable with ECC-on nodes",
                {"current": current, "pending": pending},
            )
        else:
            add("ecc_mode", OK, "ECC on", {"current": current, "pending": pending})
        unc = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        volatile = _call(
            nvml, "nvmlDeviceGetTotalEccErrors", handle, unc, getattr(nvml, "NVML_VOLATILE_ECC", 0)
        )
        aggregate = _call(
            nvml,
            "nvmlDeviceGetTotalEccErrors",
            handle,
            unc,
            getattr(nvml, "NVML_AGGREGATE_ECC", 1),
        )
        value = {"volatile": volatile, "aggregate": aggregate}
        if volatile:
            add(
                "ecc_errors",
                FAIL,
                f"{volatile} uncorrected ECC error(s) since the driver loaded: reset the GPU "
                "(nvidia-smi -r) before measuring",
                value,
            )
        elif aggregate:
            add(
                "ecc_errors",
                WARN,
                f"{aggregate} uncorrected ECC error(s) over the GPU's life (none since the "
                "driver loaded): watch this GPU",
                value,
            )
        elif volatile is not None or aggregate is not None:
            add("ecc_errors", OK, "no uncorrected ECC error", value)
    rows = _call(nvml, "nvmlDeviceGetRemappedRows", handle)
    if rows is not None:
        corr, unc_rows, pending, failure = (int(x) for x in rows[:4])
        value = {"correctable": corr, "uncorrectable": unc_rows, "pending": pending,
                 "failure": failure}  # fmt: skip
        if failure:
            add("remapped_rows", FAIL, "row remapping failed: the GPU needs service", value)
        elif pending:
            add("remapped_rows", FAIL, "row remapping pending: reset the GPU", value)
        else:
            add("remapped_rows", OK, f"{corr + unc_rows} row(s) remapped, none pending", value)
    pages = []
    for cause in ("MULTIPLE_SINGLE_BIT_ECC_ERRORS", "DOUBLE_BIT_ECC_ERROR"):
        const = getattr(nvml, f"NVML_PAGE_RETIREMENT_CAUSE_{cause}", None)
        if const is not None:
            found = _call(nvml, "nvmlDeviceGetRetiredPages", handle, const)
            if found is not None:
                pages.append(len(found))
    pending_pages = _call(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if pages or pending_pages is not None:
        count = sum(pages)
        value = {"retired": count, "pending": bool(pending_pages)}
        if pending_pages:
            add("retired_pages", FAIL, "page retirement pending: reset the GPU", value)
        elif count >= RETIRED_PAGES_WARN:
            add(
                "retired_pages",
                WARN,
                f"{count} pages retired (the usual replacement threshold is {RETIRED_PAGES_WARN})",
                value,
            )
        else:
            add("retired_pages", OK, f"{count} page(s) retired, none pending", value)
    mig = _call(nvml, "nvmlDeviceGetMigMode", handle)
    if mig is not None:
        current, pending = int(mig[0]), int(mig[1])
        enabled = getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
        value = {"current": current, "pending": pending}
        if current != pending:
            add("mig_mode", WARN, "MIG mode changes at the next reset", value)
        elif current == enabled:
            add(
                "mig_mode",
                WARN,
                "MIG on: the suite measures the GPU's slices, not the whole GPU",
                value,
            )
        else:
            add("mig_mode", OK, "MIG off", value)
    temp = _call(nvml, "nvmlDeviceGetTemperature", handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
    slowdown = _call(
        nvml,
        "nvmlDeviceGetTemperatureThreshold",
        handle,
        getattr(nvml, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1),
    )
    if temp is not None:
        value = {"temperature": temp, "slowdown": slowdown}
        if slowdown:
            if temp >= slowdown:
                add(
                    "temperature",
                    FAIL,
                    f"{temp} °C at rest, at or above the slowdown threshold {slowdown} °C: "
                    "cooling has failed",
                    value,
                )
            elif temp >= slowdown - TEMPERATURE_MARGIN:
                add(
                    "temperature",
                    WARN,
                    f"{temp} °C at rest, {slowdown - temp} °C below the slowdown threshold "
                    f"{slowdown} °C: under load it will slow down",
                    value,
                )
            else:
                add("temperature", OK, f"{temp} °C (slowdown at {slowdown} °C)", value)
        else:
            add("temperature", OK, f"{temp} °C", value)
    return out


def check_driver(nvml: Any, needed: tuple[int, int] | None, source: str | None) -> Finding | None:
    """The driver's CUDA version against what the pinned CUDA build needs."""
    version = _call(nvml, "nvmlSystemGetDriverVersion")
    cuda = _call(nvml, "nvmlSystemGetCudaDriverVersion")
    if isinstance(version, bytes):
        version = version.decode()
    if cuda is None:
        return None
    have = (int(cuda) // 1000, (int(cuda) % 1000) // 10)
    words = f"driver {version} supports CUDA {have[0]}.{have[1]}"
    value = {"driver": version, "cuda": f"{have[0]}.{have[1]}"}
    if needed is None:
        return Finding("driver", "nvidia", OK, words, value)
    value["needed"] = f"{needed[0]}.{needed[1]}"
    if have < tuple(needed):
        return Finding(
            "driver",
            "nvidia",
            FAIL,
            f"{words}, the pinned CUDA build needs {needed[0]}.{needed[1]} ({source}): update "
            "the driver or pin a torch build for this CUDA version",
            value,
        )
    return Finding(
        "driver", "nvidia", OK, f"{words}; the pinned build needs {needed[0]}.{needed[1]}", value
    )


def merge_alike(findings: list[Finding], prefix: str = "gpu") -> list[Finding]:
    """One ``ok`` line per check for devices that all passed it (``gpu0-7``), instead of
    one per device; non-ok findings stay one per device, so each says which GPU."""
    out: list[Finding] = []
    by_check: dict[str, list[Finding]] = {}
    order: list[str] = []
    for f in findings:
        if f.check not in by_check:
            order.append(f.check)
        by_check.setdefault(f.check, []).append(f)
    for check in order:
        group = by_check[check]
        good = [f for f in group if f.severity == OK]
        bad = [f for f in group if f.severity != OK]
        if len(good) > 1 and all(f.subject.startswith(prefix) for f in good):
            ids = [f.subject[len(prefix) :] for f in good]
            span = (
                f"{prefix}{ids[0]}-{ids[-1]}"
                if all(i.isdigit() for i in ids)
                and [int(i) for i in ids] == list(range(int(ids[0]), int(ids[0]) + len(ids)))
                else prefix + ",".join(ids)
            )
            reasons = {f.reason for f in good}
            reason = good[0].reason if len(reasons) == 1 else f"{good[0].reason} (and others)"
            out.append(Finding(check, span, OK, reason, [f.value for f in good]))
        else:
            out.extend(good)
        out.extend(bad)
    return out


def nvidia_findings(
    nvml: Any = None, *, cuda_needed: tuple[int, int] | None = None, cuda_source: str = ""
) -> list[Finding]:
    """Every NVML check on every device this process may use (``CUDA_VISIBLE_DEVICES``
    indexes; all devices otherwise). [] when NVML is absent or no driver answers."""
    try:
        fake = fake_gpus()
    except AcceleratorSettingError as err:
        return [Finding("gpus", "gpu", FAIL, str(err))]
    if fake is not None:
        reason = f"{fake.count} fake {fake.arch} devices (MILABENCH_FAKE_GPUS): not checked"
        return [Finding("gpus", "gpu", OK, reason)]
    if nvml is None:
        try:
            import pynvml as nvml  # noqa: PLC0415 - optional, NVIDIA machines only
        except ImportError:
            return []
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no device: not an NVIDIA machine
        return []
    try:
        count = int(nvml.nvmlDeviceGetCount())
        indexes = _visible_indexes(count)
        if indexes is None:
            indexes = list(range(count))
        found: list[Finding] = []
        for i in indexes:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
            except nvml.NVMLError as err:
                found.append(Finding("gpu", f"gpu{i}", FAIL, f"NVML cannot open it: {err}"))
                continue
            found += _nvml_device_findings(nvml, handle, f"gpu{i}")
        out = merge_alike(found)
        driver = check_driver(nvml, cuda_needed, cuda_source)
        if driver is not None:
            out.append(driver)
        return out
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


# -- AMD and Intel (sysfs, what rocm-smi and xpu-smi read) --------------------------------

AMD_VENDOR = "0x1002"
INTEL_VENDOR = "0x8086"
_DISPLAY_CLASS = ("0x0300", "0x0302", "0x0380", "0x1200")  # VGA, 3D, display, processing


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def _link(text: str | None) -> str | None:
    return text.strip() if text else None


def _hwmon(device: str) -> str | None:
    try:
        names = sorted(os.listdir(f"{device}/hwmon"))
    except OSError:
        return None
    return f"{device}/hwmon/{names[0]}" if names else None


def _sysfs_gpu_findings(device: str, subject: str, vendor: str) -> list[Finding]:
    out: list[Finding] = []

    def add(check: str, severity: str, reason: str, value: Any = None) -> None:
        out.append(Finding(check, subject, severity, reason, value))

    width = _num(read_text(f"{device}/current_link_width"))
    max_width = _num(read_text(f"{device}/max_link_width"))
    speed = _link(read_text(f"{device}/current_link_speed"))
    max_speed = _link(read_text(f"{device}/max_link_speed"))
    if width and max_width:
        value = {"width": width, "max_width": max_width, "speed": speed, "max_speed": max_speed}
        if width < max_width:
            add(
                "pcie_link",
                WARN,
                f"PCIe x{width:.0f} ({speed}), the device allows x{max_width:.0f}: host-device "
                "copies are slower (reseat the card, check the slot)",
                value,
            )
        else:
            add("pcie_link", OK, f"PCIe x{width:.0f} ({speed})", value)
    hwmon = _hwmon(device)
    if hwmon is not None:
        cap = _num(read_text(f"{hwmon}/power1_cap"))
        default = _num(read_text(f"{hwmon}/power1_cap_default"))
        if cap is None:  # Intel xe/i915: the sustained limit and the card's rated maximum
            cap = _num(read_text(f"{hwmon}/power1_max"))
            default = _num(read_text(f"{hwmon}/power1_rated_max"))
        if cap and default:
            ratio = cap / default
            value = {"limit_w": cap / 1e6, "default_w": default / 1e6}
            words = f"power cap {cap / 1e6:.0f} W"
            if ratio < POWER_LIMIT_FAIL:
                add(
                    "power_limit",
                    FAIL,
                    f"{words} is {_pct(ratio)} of the default {default / 1e6:.0f} W: the GPU is "
                    "capped and will measure slower",
                    value,
                )
            else:
                add("power_limit", OK, f"{words} (default {default / 1e6:.0f} W)", value)
        temp = _num(read_text(f"{hwmon}/temp1_input"))
        crit = _num(read_text(f"{hwmon}/temp1_crit"))
        if temp is not None:
            t, c = temp / 1000, (crit / 1000 if crit else None)
            value = {"temperature": t, "critical": c}
            if c and t >= c - TEMPERATURE_MARGIN:
                add(
                    "temperature",
                    FAIL if t >= c else WARN,
                    f"{t:.0f} °C at rest, critical at {c:.0f} °C: check cooling",
                    value,
                )
            else:
                add("temperature", OK, f"{t:.0f} °C" + (f" (critical {c:.0f} °C)" if c else ""),
                    value)  # fmt: skip
    if vendor == AMD_VENDOR:
        level = read_text(f"{device}/power_dpm_force_performance_level")
        if level is not None:
            level = level.strip()
            if level in ("auto", "high", "peak"):
                add("perf_level", OK, f"performance level {level}", level)
            else:
                add(
                    "perf_level",
                    WARN,
                    f"performance level forced to {level}: clocks are held (rocm-smi "
                    "--setperflevel auto)",
                    level,
                )
        ras = read_text(f"{device}/ras/umc_err_count")
        if ras is not None:
            counts = {}
            for line in ras.splitlines():
                key, _, raw = line.partition(":")
                if raw.strip().isdigit():
                    counts[key.strip()] = int(raw.strip())
            if counts.get("ue"):
                add(
                    "ecc_errors",
                    FAIL,
                    f"{counts['ue']} uncorrectable memory error(s) (RAS): reset or service the GPU",
                    counts,
                )
            else:
                add("ecc_errors", OK, "no uncorrectable memory error (RAS)", counts)
    return out


def sysfs_gpu_findings(root: str = "/sys/bus/pci/devices") -> list[Finding]:
    """AMD and Intel GPUs found among the PCI devices (NVIDIA ones are NVML's)."""
    out: list[Finding] = []
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    index = {AMD_VENDOR: 0, INTEL_VENDOR: 0}
    for name in names:
        device = f"{root}/{name}"
        vendor = (read_text(f"{device}/vendor") or "").strip()
        klass = (read_text(f"{device}/class") or "").strip()
        if vendor not in index or not klass.startswith(_DISPLAY_CLASS):
            continue
        if vendor == INTEL_VENDOR and _hwmon(device) is None:
            continue  # an integrated display controller without power management
        prefix = "amd" if vendor == AMD_VENDOR else "intel"
        found = _sysfs_gpu_findings(device, f"{prefix}{index[vendor]}", vendor)
        index[vendor] += 1
        out += found
    return merge_alike(merge_alike(out, "amd"), "intel")


# -- everything --------------------------------------------------------------------------


def run_checks(
    *,
    sample: float = DEFAULT_SAMPLE,
    paths: Sequence[str] = (),
    cuda_needed: tuple[int, int] | None = None,
    cuda_source: str = "",
    modules: bool = False,
    python_hint: str = "--node-python PATH or the fleet.python option",
    nvml: Any = None,
) -> list[Finding]:
    """Every check of this machine: host, then NVIDIA, AMD and Intel GPUs, then (with
    ``modules``) whether this interpreter can run milabench."""
    out = host_findings(sample=sample, paths=paths)
    out += nvidia_findings(nvml, cuda_needed=cuda_needed, cuda_source=cuda_source)
    out += sysfs_gpu_findings()
    if modules:
        out.append(check_modules(python_hint=python_hint))
    return out


def render_findings(findings: Sequence[Finding], *, only_problems: bool = False) -> str:
    """The findings as one table: check, subject, severity, reason."""
    rows = [f for f in findings if not only_problems or f.severity != OK]
    header = ("check", "subject", "severity", "reason")
    cells = [header] + [(f.check, f.subject, f.severity, f.reason) for f in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(3)]
    return "\n".join(
        "  ".join(c[i].ljust(widths[i]) for i in range(3)) + "  " + c[3] for c in cells
    )


def summary_line(findings: Sequence[Finding]) -> str:
    """``2 warnings, 1 failure`` / ``no problem`` (ok findings counted apart)."""
    n_warn = sum(f.severity == WARN for f in findings)
    n_fail = sum(f.severity == FAIL for f in findings)
    parts = []
    if n_fail:
        parts.append(f"{n_fail} failure{'s' if n_fail != 1 else ''}")
    if n_warn:
        parts.append(f"{n_warn} warning{'s' if n_warn != 1 else ''}")
    return ", ".join(parts) or "no problem"


DOCTOR_FILE = "doctor.json"  # in a run folder: the findings `milabench run` started with
DOCTOR_KIND = "milabench-doctor"
DOCTOR_SCHEMA_VERSION = 1


def doctor_record(findings: Sequence[Finding], *, ignored: bool = False) -> dict[str, Any]:
    """The JSON document of a check: ``doctor.json`` in a run folder, ``milabench doctor
    --format json``. ``ignored``: the run started despite a failure (``--ignore-doctor``)."""
    import platform

    return {
        "kind": DOCTOR_KIND,
        "schema_version": DOCTOR_SCHEMA_VERSION,
        "time": time.time(),
        "hostname": platform.node(),
        "worst": worst(findings),
        "ignored": ignored,
        "findings": [f.as_dict() for f in findings],
    }


def write_doctor_file(folder: str, findings: Sequence[Finding], *, ignored: bool = False) -> str:
    """Write ``doctor.json`` into ``folder`` (created), atomically; its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, DOCTOR_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doctor_record(findings, ignored=ignored), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path


def read_doctor_file(folder: str) -> list[Finding] | None:
    """The findings of a run folder's ``doctor.json`` (None when absent or unreadable: a
    run made before the doctor existed, or a file cut short)."""
    text = read_text(os.path.join(folder, DOCTOR_FILE))
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    items = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    return [Finding.from_dict(x) for x in items if isinstance(x, dict)]


def probe_argv(
    python: str,
    *,
    paths: Sequence[str] = (),
    sample: float = DEFAULT_SAMPLE,
    modules: bool = True,
    cuda_needed: tuple[int, int] | None = None,
    cuda_source: str = "",
    python_hint: str | None = None,
) -> list[str]:
    """The command that runs these checks on a node with only its own ``python``: this
    file's text inline (``-c``, with `SHIPPED_MODULES`), findings printed as
    ``@milabench-doctor {json}``."""
    from milabench.monitor.inline import inline_program  # not needed on the node

    with open(__file__, encoding="utf-8") as f:
        source = inline_program(f.read(), SHIPPED_MODULES, filename="<milabench-doctor>")
    argv = [python, "-c", source, "--json", "--sample", str(sample)]
    for p in paths:
        argv += ["--path", p]
    if modules:
        argv.append("--modules")
    if cuda_needed is not None:
        argv += ["--cuda", f"{cuda_needed[0]}.{cuda_needed[1]}", "--cuda-source", cuda_source]
    if python_hint:
        argv += ["--python-hint", python_hint]
    return argv


def parse_probe_output(stdout: str) -> list[Finding] | None:
    """The findings a probe printed (None when it printed no result line)."""
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            try:
                data = json.loads(line[len(RESULT_PREFIX) :])
            except ValueError:
                return None
            items = data.get("findings") if isinstance(data, dict) else None
            if not isinstance(items, list):
                return None
            return [Finding.from_dict(x) for x in items if isinstance(x, dict)]
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the checks; print the table, or the ``@milabench-doctor`` JSON line."""
    parser = argparse.ArgumentParser(prog="milabench-doctor-probe")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sample", type=float, default=DEFAULT_SAMPLE)
    parser.add_argument("--path", action="append", default=[])
    parser.add_argument("--modules", action="store_true")
    parser.add_argument("--cuda", default=None)
    parser.add_argument("--cuda-source", default="")
    parser.add_argument("--python-hint", default="--node-python PATH or the fleet.python option")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    needed = None
    if args.cuda:
        major, _, minor = args.cuda.partition(".")
        needed = (int(major), int(minor or 0))
    found = run_checks(
        sample=args.sample,
        paths=args.path,
        cuda_needed=needed,
        cuda_source=args.cuda_source,
        modules=args.modules,
        python_hint=args.python_hint,
    )
    if args.json:
        print(RESULT_PREFIX + json.dumps({"findings": [f.as_dict() for f in found]}), flush=True)
    else:
        print(render_findings(found))
    return 1 if failures(found) else 0


if __name__ == "__main__":
    sys.exit(main())
