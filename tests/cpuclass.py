"""Two classes of CPU time for the test session: the foreground and the background.

The session's controller makes a cgroup v1 ``cpu`` group marked idle (``cpu.idle`` 1, or
``cpu.shares`` 2 on a kernel without it) under its own group (`make_background`) and names
it in `ENV` for the workers. A worker joins it when it starts (`join_background`): every
test, and every process a test starts, then gets a CPU only when no foreground process
wants it. A quiet test moves its worker back to the foreground for its duration
(`foreground`): what it measures runs at full speed beside the ordinary tests, which take
what it leaves. A group of the scheduler, not a nice value: a process that starts a new
session (a benchmark, sshd) would get an autogroup of its own with a full share.

Without a writable ``cpu`` controller (not root, cgroup v2 only), or with
``MILABENCH_TEST_BACKGROUND=off``, there is no background: `background()` is None and the
quiet tests run alone instead (tests/concurrency.py).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
ENV = "MILABENCH_TEST_BACKGROUND"
OFF = "off"  # ENV's value that keeps every test in the foreground (quiet ones then alone)


def own_group(pid: int | str = "self") -> Path | None:
    """The cgroup v1 ``cpu`` group of process ``pid``, as a folder; None without one."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return CPU_ROOT / path.lstrip("/")
    return None


def _create(name: str) -> Path:
    """An idle group ``name`` under this process's own ``cpu`` group, checked by moving
    this process in and back; OSError (the group removed) when that cannot be done."""
    parent = own_group()
    if parent is None or not (parent / "cgroup.procs").is_file():
        raise FileNotFoundError(f"no cgroup v1 cpu controller at {CPU_ROOT}")
    group = parent / name
    try:
        group.mkdir(exist_ok=True)
        idle = group / "cpu.idle"
        if idle.is_file():
            idle.write_text("1\n")
        else:
            (group / "cpu.shares").write_text("2\n")
        _join(group)
        _join(parent)
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        raise
    return group


def problem() -> str | None:
    """None when an idle group can be made and joined here, else why not."""
    try:
        group = _create(f"milabench-probe-{os.getpid()}")
    except OSError as err:
        return f"no idle CPU group: {err.strerror or err}"
    group.rmdir()
    return None


def make_background(run: str) -> Path | None:
    """Create the session's idle group under this process's own ``cpu`` group and name it
    in `ENV`; None (and nothing set) when that cannot be done here."""
    try:
        group = _create(f"milabench-tests-{run}")
    except OSError:
        return None
    os.environ[ENV] = str(group)
    return group


def background() -> Path | None:
    """The session's idle group, where the controller made one."""
    value = os.environ.get(ENV)
    return Path(value) if value and Path(value, "cgroup.procs").is_file() else None


def _join(group: Path, pid: int | None = None) -> None:
    (group / "cgroup.procs").write_text(f"{pid or os.getpid()}\n")


def join_background() -> None:
    """Move this process (all its threads) into the session's idle group, if there is one."""
    if (group := background()) is not None:
        _join(group)


@contextlib.contextmanager
def foreground() -> Iterator[None]:
    """This process, and what it starts meanwhile, in the foreground (the idle group's
    parent) for the duration; back in the idle group after. Nothing without a background."""
    group = background()
    if group is None or own_group() != group:
        yield
        return
    _join(group.parent)
    try:
        yield
    finally:
        _join(group)


def remove_background(group: Path) -> None:
    """Move what is left in the idle group (and its children) to its parent, then remove
    them: the cgroup folders do not outlive the session."""
    for child in sorted((p for p in group.rglob("*") if p.is_dir()), reverse=True):
        _empty_and_remove(child, group.parent)
    _empty_and_remove(group, group.parent)


def _empty_and_remove(group: Path, into: Path) -> None:
    deadline = time.monotonic() + 5
    while True:
        try:
            pids = (group / "cgroup.procs").read_text().split()
        except OSError:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                _join(into, int(pid))
        try:
            group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
