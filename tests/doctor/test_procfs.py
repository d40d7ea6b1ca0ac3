"""The /proc readers of `milabench.monitor.health`, on this machine's live files and on
files recorded from the development machine (tests/doctor/recorded/README.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from milabench.monitor import health

RECORDED = Path(__file__).parent / "recorded"


def text(name: str) -> str:
    return (RECORDED / name).read_text()


def test_recorded_proc_stat_pair_gives_the_busy_and_stolen_time():
    before, cpus = health.parse_proc_stat(text("stat.1"))
    after, _ = health.parse_proc_stat(text("stat.2"))
    assert cpus == 2
    assert before.steal == 334 and after.user > before.user
    a = health.HostSnapshot(0.0, before, cpus, None, None)
    b = health.HostSnapshot(2.0, after, cpus, None, None)
    usage = health.host_usage(a, b)
    ticks = health.CLOCK_TICKS
    assert usage.busy == pytest.approx((after.busy - before.busy) / ticks)
    assert usage.steal == pytest.approx(0.07 * 100 / ticks)
    assert usage.share(usage.busy) == pytest.approx(usage.busy / 4.0)


def test_recorded_pressure_and_meminfo_and_vmstat():
    some = health.parse_pressure(text("pressure-cpu.2"))["some"]
    assert some["avg60"] == 80.21 and some["total"] == 552760083.0
    assert health.parse_pressure(text("pressure-cpu.2"))["full"]["total"] == 0.0
    waited = some["total"] - health.parse_pressure(text("pressure-cpu.1"))["some"]["total"]
    assert 1.5e6 < waited < 2.0e6  # microseconds over the two seconds
    mem = health.parse_meminfo(text("meminfo"))
    assert mem["MemTotal"] == 25276514304 and mem["MemAvailable"] == 23664631808
    assert mem["SwapTotal"] == 0
    assert health.parse_vmstat(text("vmstat.1"))["pswpin"] == 0


def test_recorded_pid_stat_with_spaces_and_parentheses_in_the_name():
    found = health.parse_pid_stat(text("pid-stat-odd-name"))
    assert found.comm == "a (b) c" and found.state == "S" and found.ppid == 1
    assert found.ticks == 0


def test_live_files_of_this_machine():
    times, cpus = health.parse_proc_stat(Path("/proc/stat").read_text())
    assert cpus == os.cpu_count() and times.total > times.busy > 0
    mem = health.parse_meminfo(Path("/proc/meminfo").read_text())
    assert 0 < mem["MemAvailable"] <= mem["MemTotal"]
    me = health.read_pid_stat(os.getpid())
    assert me is not None and me.comm and me.ppid == os.getppid()
    if Path("/proc/pressure/cpu").exists():
        assert "avg10" in health.parse_pressure(Path("/proc/pressure/cpu").read_text())["some"]


@pytest.mark.quiet  # its own busy process must get a CPU at once
def test_a_busy_process_of_this_machine_is_named_with_its_cpu(tmp_path):
    """A real process burning a CPU is seen between two real snapshots, under its name."""
    hog = tmp_path / "mb-test-spin"
    shutil.copy("/usr/bin/yes", hog)
    proc = subprocess.Popen([str(hog)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.2)
        first = health.host_snapshot(processes=True)
        time.sleep(1.0)
        second = health.host_snapshot(processes=True)
    finally:
        proc.kill()
        proc.wait()
    usage = health.host_usage(first, second, top=50)
    mine = [(name, count, used) for name, count, used in usage.top if name == "mb-test-spin"]
    assert mine and mine[0][1] == 1
    assert mine[0][2] >= 1 / health.CLOCK_TICKS  # it ran (a loaded machine gives it little)
    assert usage.busy is not None and usage.busy >= mine[0][2] * 0.9


@pytest.mark.quiet  # samples the host for 0.2 s
def test_host_findings_never_fail_on_an_ordinary_machine(tmp_path):
    found = health.host_findings(sample=0.2, paths=[str(tmp_path)])
    checks = {f.check for f in found}
    assert {"cpu_governor", "steal", "cpu_pressure", "other_processes", "memory", "swap"} <= checks
    assert "disk" in checks
    assert all(f.severity in health.SEVERITIES and f.reason for f in found)
    assert not [f for f in found if f.severity == health.FAIL and f.check != "disk"]
