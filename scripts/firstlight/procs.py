"""Commands under a wall-clock deadline, and every process they start accounted for.

A first-light call must end by its deadline whatever its commands do: a benchmark that
hangs, a milabench that does not answer Ctrl-C, a loader worker that outlives its parent.
`run_bounded` starts a command in a session of its own, waits at most its timeout, then
interrupts it (SIGINT: milabench stops its benchmarks and writes its run files), and
after a grace kills every process left below this one, in any session. Benchmarks start
sessions of their own, so killing the command's process group is not enough: this
process marks itself a child subreaper (Linux), so that orphans of a killed command are
re-parented to it and found by walking ``/proc``.

Standard library only: it runs before milabench's dependencies are installed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux; False elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class Deadline:
    """A point in time (monotonic clock) that a whole call must end by."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.end = self.start + seconds

    def left(self) -> float:
        """Seconds until the deadline (negative once past it)."""
        return self.end - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: split after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            out[int(name)] = int(fields[1])
    return out


def descendants(root: int) -> list[int]:
    """Every living process below ``root`` (children first found, breadth first)."""
    if not os.path.isdir("/proc"):
        return []
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[:1] != [b"Z"]


def command_line(pid: int, limit: int = 160) -> str:
    """``pid``'s command line as one line of at most ``limit`` characters (its name in
    brackets when /proc has no command line, '?' when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            words = [w.decode(errors="replace") for w in fh.read().split(b"\0") if w]
        if not words:
            with open(f"/proc/{pid}/comm", "rb") as fh:
                words = [f"[{fh.read().decode(errors='replace').strip()}]"]
    except OSError:
        return "?"
    line = " ".join(words)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def kill_descendants(
    root: int | None = None, wait: float = 2.0, seen: list[str] | None = None
) -> int:
    """SIGKILL every process below ``root`` (default: this one), wait up to ``wait``
    seconds for them to die, and reap the zombies that are this process's children; the
    number of processes killed. ``seen``: appended with ``"PID COMMAND"`` for each, read
    before the kill (what a log names)."""
    root = os.getpid() if root is None else root
    pids = descendants(root)
    if seen is not None:
        seen.extend(f"{pid} {command_line(pid)}" for pid in pids)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + wait
    while True:
        reap()
        if not any(_alive(pid) for pid in pids) or time.monotonic() > end:
            return len(pids)
        time.sleep(0.02)


def reap() -> None:
    """Collect exited children (orphans re-parented to this subreaper among them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


@dataclass
class Outcome:
    """How a bounded command ended: ``rc`` None when it was stopped at its timeout."""

    rc: int | None
    seconds: float
    killed: int = 0  # processes still alive after the grace, killed

    @property
    def timed_out(self) -> bool:
        return self.rc is None


def run_bounded(
    argv: list[str],
    *,
    timeout: float,
    log: Path,
    stdout: Path | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    grace: float = 10.0,
) -> Outcome:
    """Run ``argv`` for at most ``timeout`` seconds plus ``grace``, and leave nothing.

    Standard error (and standard output unless ``stdout`` names a file) is appended to
    ``log``, after a ``$ command`` line and before a line of its seconds and exit code
    (the GPU's time, read afterwards). At the timeout the command's session gets SIGINT
    (a Ctrl-C: milabench stops its benchmarks and writes a partial run); whatever is
    still alive ``grace`` seconds later, below this process, is killed with SIGKILL. On a
    normal exit too, processes the command left behind are killed. So the call returns
    within ``timeout + grace`` (plus a fraction of a second), whatever the command does.
    """
    timeout = max(timeout, 0.5)
    start = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as err:
        err.write(f"$ {' '.join(argv)}\n")
        err.flush()
        out = open(stdout, "w") if stdout else err  # noqa: SIM115 - closed below
        try:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True
            )
        finally:
            if stdout:
                out.close()
        rc: int | None
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
            _signal_group(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        seen: list[str] = []
        killed = kill_descendants(seen=seen)
        if proc.poll() is None:  # not below us any more? (cannot happen: it is our child)
            proc.kill()
            proc.wait()
        if rc is None:
            err.write(f"first light: stopped at its time limit of {timeout:.0f} s\n")
        elif killed:
            err.write(f"first light: {killed} process(es) left behind, killed: "
                      f"{'; '.join(seen)}\n")  # fmt: skip
        seconds = time.monotonic() - start
        err.write(f"first light: {seconds:.1f} s, exit code {rc if rc is not None else '-'}\n")
    return Outcome(rc, seconds, killed)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
