"""The /proc readers of `milabench.machine.procfs`, on this machine's live files and on
files recorded from the development machine (tests/doctor/recorded/README.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from milabench.doctor.findings import FAIL, SEVERITIES
from milabench.doctor.host import busy_parts, host_cpu_findings, host_findings
from milabench.machine.procfs import (
    CLOCK_TICKS,
    CpuTimes,
    HostSnapshot,
    host_snapshot,
    host_usage,
    parse_meminfo,
    parse_pid_stat,
    parse_pressure,
    parse_proc_stat,
    parse_vmstat,
    read_pid_stat,
)

RECORDED = Path(__file__).parent / "recorded"


def text(name: str) -> str:
    return (RECORDED / name).read_text()


def test_recorded_proc_stat_pair_gives_the_busy_and_stolen_time():
    before, cpus = parse_proc_stat(text("stat.1"))
    after, _ = parse_proc_stat(text("stat.2"))
    assert cpus == 2
    assert before.steal == 334 and after.user > before.user
    a = HostSnapshot(0.0, before, cpus, None, None)
    b = HostSnapshot(2.0, after, cpus, None, None)
    usage = host_usage(a, b)
    ticks = CLOCK_TICKS
    assert usage.busy == pytest.approx((after.busy - before.busy) / ticks)
    assert usage.steal == pytest.approx(0.07 * 100 / ticks)
    assert usage.share(usage.busy) == pytest.approx(usage.busy / 4.0)


def test_recorded_pressure_and_meminfo_and_vmstat():
    some = parse_pressure(text("pressure-cpu.2"))["some"]
    assert some["avg60"] == 80.21 and some["total"] == 552760083.0
    assert parse_pressure(text("pressure-cpu.2"))["full"]["total"] == 0.0
    waited = some["total"] - parse_pressure(text("pressure-cpu.1"))["some"]["total"]
    assert 1.5e6 < waited < 2.0e6  # microseconds over the two seconds
    mem = parse_meminfo(text("meminfo"))
    assert mem["MemTotal"] == 25276514304 and mem["MemAvailable"] == 23664631808
    assert mem["SwapTotal"] == 0
    assert parse_vmstat(text("vmstat.1"))["pswpin"] == 0


def test_recorded_pid_stat_with_spaces_and_parentheses_in_the_name():
    found = parse_pid_stat(text("pid-stat-odd-name"))
    assert found.comm == "a (b) c" and found.state == "S" and found.ppid == 1
    assert found.ticks == 0


def test_live_files_of_this_machine():
    times, cpus = parse_proc_stat(Path("/proc/stat").read_text())
    assert cpus == os.cpu_count() and times.total > times.busy > 0
    mem = parse_meminfo(Path("/proc/meminfo").read_text())
    assert 0 < mem["MemAvailable"] <= mem["MemTotal"]
    me = read_pid_stat(os.getpid())
    assert me is not None and me.comm and me.ppid == os.getppid()
    if Path("/proc/pressure/cpu").exists():
        assert "avg10" in parse_pressure(Path("/proc/pressure/cpu").read_text())["some"]


@pytest.mark.quiet  # its own busy process must get a CPU at once
def test_a_busy_process_of_this_machine_is_named_with_its_cpu(tmp_path):
    """A real process burning a CPU is seen between two real snapshots, under its name."""
    hog = tmp_path / "mb-test-spin"
    shutil.copy("/usr/bin/yes", hog)
    proc = subprocess.Popen([str(hog)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.2)
        first = host_snapshot(processes=True)
        time.sleep(1.0)
        second = host_snapshot(processes=True)
    finally:
        proc.kill()
        proc.wait()
    usage = host_usage(first, second, top=50)
    mine = [(name, count, used) for name, count, used in usage.top if name == "mb-test-spin"]
    assert mine and mine[0][1] == 1
    assert mine[0][2] >= 1 / CLOCK_TICKS  # it ran (a loaded machine gives it little)
    assert usage.busy is not None and usage.busy >= mine[0][2] * 0.9


@pytest.mark.quiet  # samples the host for 0.2 s
def test_host_findings_never_fail_on_an_ordinary_machine(tmp_path):
    found = host_findings(sample=0.2, paths=[str(tmp_path)])
    checks = {f.check for f in found}
    assert {"cpu_governor", "steal", "cpu_pressure", "other_processes", "memory", "swap"} <= checks
    assert "disk" in checks and "shm" in checks
    assert all(f.severity in SEVERITIES and f.reason for f in found)
    assert not [f for f in found if f.severity == FAIL and f.check != "disk"]


def test_the_busy_line_accounts_for_every_cpu_second_it_reports():
    """Processes seen at both ends, one born during the sample (its whole life), the
    short-lived ones (what their parents reaped) and the kernel's rest add up to the busy
    time of /proc/stat."""
    tick = CLOCK_TICKS
    cpu0 = CpuTimes(0, 0, 0, 0, 0, 0, 0, 0)
    cpu1 = CpuTimes(int(1.9 * tick), 0, 0, 0, 0, 0, 0, 0)  # 1.9 CPU-s over 1 s
    before = {1: ("make", 0, 0), 2: ("pip", 10, 0), 3: ("sshd", 5, 0), 4: ("bash", 0, 0)}
    after = {
        1: ("make", int(0.1 * tick), int(0.8 * tick)),  # reaped 0.8 s of compilers
        2: ("pip", 10 + int(0.5 * tick), 0),
        3: ("sshd", 5 + int(0.02 * tick), 0),
        4: ("bash", int(0.01 * tick), int(0.1 * tick)),
        9: ("cc1", int(0.3 * tick), 0),  # born during the sample, still running
    }
    usage = host_usage(
        HostSnapshot(0.0, cpu0, 2, None, None, before),
        HostSnapshot(1.0, cpu1, 2, None, None, after),
    )
    assert usage.named == pytest.approx(0.93, abs=0.02) and usage.commands == 5
    assert [comm for comm, _ in usage.reaped] == ["make", "bash"]
    [finding] = [f for f in host_cpu_findings(usage, None) if f.check == "other_processes"]
    assert finding.reason == (
        "other processes busy on 1.90 of 2 CPUs (95%) over 1.0 s: pip 0.50, cc1 0.30, "
        "make 0.10, 2 other commands 0.03, short-lived processes 0.90 (reaped by make 0.80, "
        "bash 0.10), no process 0.07 (the kernel, processes not yet reaped): the benchmarks "
        "will share the CPUs with them"
    )
    parts = busy_parts(usage)  # each part's CPUs: the number before its details
    shares = [float(re.search(r"(\d+\.\d\d)(?: \(|$)", part).group(1)) for part in parts]
    assert len(shares) == 6 and sum(shares) == pytest.approx(1.90, abs=0.011)


@pytest.mark.quiet  # its own short-lived processes must get a CPU at once
def test_short_lived_processes_of_this_machine_are_counted_under_their_parent(tmp_path):
    """A shell that starts a busy process every 50 ms: each is gone before the second
    snapshot, and the shell's reaped-children counter shows their time."""
    hog = tmp_path / "mb-test-spin"
    shutil.copy("/usr/bin/yes", hog)
    script = f"while :; do timeout 0.05 {hog} > /dev/null; done"
    shell = subprocess.Popen(["sh", "-c", script])
    try:
        time.sleep(0.3)
        first = host_snapshot(processes=True)
        time.sleep(1.0)
        second = host_snapshot(processes=True)
    finally:
        shell.kill()
        shell.wait()
    usage = host_usage(first, second, top=50)
    reaped = dict(usage.reaped)
    assert reaped.get("sh", 0) >= 5 / CLOCK_TICKS, usage.reaped  # it ran (a little)
    line = ", ".join(busy_parts(usage))
    assert "short-lived processes" in line and "reaped by" in line
