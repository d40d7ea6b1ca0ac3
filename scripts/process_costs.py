"""CPU seconds of every process a command starts, grouped by what the processes are: where
a test session's CPU goes, the processes that no test waits for included.

Usage::

    python scripts/process_costs.py [--interval S] [--top N] [--json FILE] -- CMD [ARG...]
    python scripts/process_costs.py -- env CI=true python -m pytest -q --system

Runs CMD and, while it runs, reads ``/proc`` every ``--interval`` seconds (default 0.5):
each process's CPU time (user and system) the first and the last time it is seen, so a
process that was there before CMD counts only what it used meanwhile. When CMD ends,
prints the CPU seconds and the number of processes of each kind (`kind`: a benchmark's
``main.py`` or ``prepare.py`` by folder, a milabench command, the install's import
check, a pytest worker, uv, torchrun, other Python scripts, other programs by name),
and the machine's busy CPU seconds over the same time (``/proc/stat``): what no sampled
process explains is what processes shorter than the interval and the kernel used.
``--json`` also writes every process seen. Exit status: CMD's. Linux only (``/proc``).
tests/file_costs.json (scripts/test_costs.py) gives the same session by test file;
docs/testing.md uses both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
BENCH = re.compile(r"benchmarks/([\w.\-]+)/(\w+)\.py\b")
# The first line of milabench's import check after an install (envs/backends.py)
IMPORT_CHECK = "failed, versions = [], {}"
MILABENCH = re.compile(r"(?:-m milabench|/bin/milabench)\s+(\w+)")


def kind(comm: str, cmdline: str, cwd: str = "") -> str:
    """What a process is, from its name, its command line (arguments joined by spaces)
    and its working folder (for a benchmark's ``main.py`` started by a relative path)."""
    if "sys.stdin.readline" in cmdline and "exec(eval(" in cmdline:
        return "pytest-xdist worker"
    if IMPORT_CHECK in cmdline:
        return "milabench install: import check"
    found = BENCH.search(cmdline)
    if found:
        return f"benchmark {found[1]}/{found[2]}"
    words = cmdline.split()
    if comm.startswith("python") or (words and "python" in Path(words[0]).name):
        for word in words[1:4]:
            if word in ("main.py", "prepare.py") and cwd:
                return f"benchmark {Path(cwd).name}/{word[:-3]}"
        command = MILABENCH.search(cmdline)
        if command:
            return f"milabench {command[1]}"
        if "-m pytest" in cmdline or "/bin/pytest" in cmdline:
            return "pytest"
        if "-m uv" in cmdline:
            return "uv"
        if "torch.distributed.run" in cmdline or "/bin/torchrun" in cmdline:
            return "torchrun"
        script = next((w for w in words[1:] if w.endswith(".py")), None)
        if script:
            return f"python {Path(script).name}"
        return "python -c" if "-c" in words[1:3] else "python (other)"
    return comm


def _read(pid: str) -> tuple[tuple[int, int], str, float] | None:
    """((pid, start time), name, CPU seconds) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    close = text.rfind(")")
    fields = text[close + 2 :].split()
    comm = text[text.find("(") + 1 : close]
    return (int(pid), int(fields[19])), comm, (int(fields[11]) + int(fields[12])) / TICK


def _describe(pid: int) -> tuple[str, str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()[:600]
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return "", ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip(), cwd


def busy_seconds() -> float:
    """The machine's busy CPU seconds since boot (``/proc/stat``: all but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(values) - values[3] - values[4]) / TICK


def sample(seen: dict) -> None:
    """Update ``seen`` ((pid, start) -> record) with every process's CPU time now (this
    one's left out: its command line holds the command's)."""
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        read = _read(pid)
        if read is None:
            continue
        key, comm, cpu = read
        if key not in seen:
            cmdline, cwd = _describe(key[0])
            seen[key] = {"pid": key[0], "comm": comm, "cmdline": cmdline, "cwd": cwd,
                         "first": cpu, "last": cpu}  # fmt: skip
        seen[key]["last"] = cpu


def table(seen: dict, top: int) -> tuple[list[tuple[float, int, str]], float]:
    """The ``top`` kinds by CPU seconds used while sampled, and the total."""
    cpu: Counter = Counter()
    count: Counter = Counter()
    for record in seen.values():
        name = kind(record["comm"], record["cmdline"], record["cwd"])
        cpu[name] += record["last"] - record["first"]
        count[name] += 1
    rows = [(seconds, count[name], name) for name, seconds in cpu.most_common(top)]
    return rows, sum(cpu.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between reads")
    parser.add_argument("--top", type=int, default=40, help="kinds printed")
    parser.add_argument("--json", type=Path, help="write every process seen to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    if not Path("/proc/stat").is_file():
        parser.error("reads /proc: Linux only")
    seen: dict = {}
    sample(seen)  # what was there before: only its use from now on counts
    start, began = busy_seconds(), time.monotonic()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        time.sleep(args.interval)
        sample(seen)
    sample(seen)
    busy, wall = busy_seconds() - start, time.monotonic() - began
    rows, total = table(seen, args.top)
    print(f"{'cpu s':>8} {'procs':>6}  kind")
    for seconds, count, name in rows:
        print(f"{seconds:8.1f} {count:6d}  {name}")
    print(f"sampled processes: {total:.0f} s of CPU; the machine: {busy:.0f} s busy in "
          f"{wall:.0f} s ({busy - total:.0f} s not explained by a sampled process)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(list(seen.values())), encoding="utf-8")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
