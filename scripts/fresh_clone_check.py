"""Run the README's quick-start commands the way a new user meets them.

Usage::

    python scripts/fresh_clone_check.py [--only 1|2] [--working-tree] [--ci]
                                        [--python PYTHON] [--keep] [--json FILE]

A fresh clone of this repository in a temporary folder (``--working-tree``: the files of
the working tree instead of HEAD, uncommitted changes included), a new virtual
environment without system site packages in the clone's ``.venv``, then each command of
the README's "Quick start" block, read from the README (never retyped), run in order by
bash in the clone with the environment activated. The process's own virtual environment, ``PYTHONPATH`` and ``MILABENCH_*``
variables are left out; pip's settings (``PIP_*``) are the machine's and stay.

Prints a summary: each command's exit status and time, pytest's counts, every failed,
errored and skipped test with its reason, and the suite's verdict line. Exit status 0 when
every command exited 0, else 1. ``--ci`` sets ``CI=true``, under which the tests turn a
skip for a missing tool into a failure (docs/testing.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

# pytest's final line: "3 failed, 1064 passed, 16 skipped, 4 errors in 1817.34s (0:30:17)"
_COUNT = re.compile(r"(\d+) (failed|passed|skipped|errors?|deselected|xfailed|xpassed)")
_FINAL = re.compile(r"^=*\s*(\d+ \w+.*) in [\d.]+s")


@dataclass
class Command:
    """One quick-start command: its number, the comment above it, the line itself."""

    number: int
    title: str
    line: str


@dataclass
class Outcome:
    command: Command
    exit_status: int
    seconds: float
    counts: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    verdict: str = ""
    log: str = ""


def quick_start_commands(readme: str) -> list[Command]:
    """The commands of the first ``bash`` block under "## Quick start": each line that is
    neither blank nor a comment, numbered by the ``# N.`` comment above it."""
    section = readme.split("## Quick start", 1)
    if len(section) != 2:
        raise SystemExit(f"{README}: no '## Quick start' section")
    block = re.search(r"```bash\n(.*?)```", section[1], re.S)
    if not block:
        raise SystemExit(f"{README}: no ```bash block under '## Quick start'")
    commands, title = [], ""
    for raw in block.group(1).splitlines():
        line = raw.strip()
        if line.startswith("#"):
            title = line.lstrip("# ").strip()
        elif line:
            number = int(m.group(1)) if (m := re.match(r"(\d+)\.", title)) else len(commands) + 1
            commands.append(Command(number, title, line))
    if not commands:
        raise SystemExit(f"{README}: the quick-start block has no command")
    return commands


def make_clone(dest: Path, working_tree: bool) -> str:
    """A fresh clone of HEAD at ``dest``, or a new repository holding the working tree's
    files (tracked and untracked, not ignored). Returns what was cloned."""
    if not working_tree:
        subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
        head = subprocess.run(["git", "-C", str(dest), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        return f"clone of HEAD ({head})"
    files = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "-c", "-o", "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout.split(b"\0")  # fmt: skip
    dest.mkdir(parents=True)
    for name in filter(None, (f.decode() for f in files)):
        src = REPO / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    git = ["git", "-C", str(dest), "-c", "user.name=check", "-c", "user.email=check@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "working tree"], check=True)
    return "working tree (uncommitted changes included)"


def base_python(given: str | None) -> str:
    """The interpreter to build the environment from: not this process's venv."""
    if given:
        return given
    return getattr(sys, "_base_executable", None) or sys.executable


def user_environment(venv: Path, ci: bool) -> dict[str, str]:
    """This process's environment as a new user's shell has it, with ``venv`` activated."""
    own_bin = str(Path(sys.prefix) / "bin") if sys.prefix != sys.base_prefix else None
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "CI")
        and not k.startswith("MILABENCH_")
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != own_bin]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONUNBUFFERED"] = "1"
    if ci:
        env["CI"] = "true"
    return env


def run_command(command: Command, cwd: Path, env: dict, log: Path, timeout: float) -> Outcome:
    """Run one command with bash, its output both shown and written to ``log``."""
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", command.line], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                sys.stdout.write(line)
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            status = 124
    outcome = Outcome(command, status, time.monotonic() - start, log=str(log))
    summarise(outcome, log.read_text(errors="replace"))
    return outcome


def summarise(outcome: Outcome, text: str) -> None:
    """Fill in pytest's counts, failures and skips, and the suite's verdict, from output."""
    for line in text.splitlines():
        if m := _FINAL.match(line.strip()):
            outcome.counts = {
                kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                for n, kind in _COUNT.findall(m.group(1))
            }
        elif line.startswith(("FAILED ", "ERROR ")):
            outcome.failed.append(line)
        elif line.startswith("SKIPPED "):
            outcome.skipped.append(line)
        elif line.startswith("Verdict:"):
            outcome.verdict = line.strip()


def report(outcomes: list[Outcome], what: str, python: str) -> str:
    lines = [f"fresh-clone check: {what}; venv from {python}, no system site packages"]
    for o in outcomes:
        state = "ok" if o.exit_status == 0 else f"FAILED (exit {o.exit_status})"
        lines.append(f"command {o.command.number}: {state} in {o.seconds / 60:.1f} min")
        lines.append(f"  $ {o.command.line}")
        if o.counts:
            lines.append("  tests: " + ", ".join(f"{n} {k}" for k, n in o.counts.items()))
        if o.verdict:
            lines.append(f"  {o.verdict}")
        lines += [f"  {ln}" for ln in o.failed]
        lines += [f"  {ln}" for ln in o.skipped]
        lines.append(f"  log: {o.log}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", type=int, help="run only command N of the quick start")
    parser.add_argument("--working-tree", action="store_true",
                        help="check the working tree's files, uncommitted changes included")  # fmt: skip
    parser.add_argument("--ci", action="store_true", help="set CI=true for the commands")
    parser.add_argument("--python", help="interpreter for the new environment")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--json", type=Path, help="also write the summary as JSON here")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per command")
    args = parser.parse_args(argv)

    commands = quick_start_commands(README.read_text())
    if args.only is not None:
        commands = [c for c in commands if c.number == args.only]
        if not commands:
            parser.error(f"the quick start has no command {args.only}")
    python = base_python(args.python)
    root = Path(tempfile.mkdtemp(prefix="milabench-fresh-"))
    clone = root / "milabench"
    outcomes: list[Outcome] = []
    what = "set-up failed"
    try:
        what = make_clone(clone, args.working_tree)
        venv = clone / ".venv"  # where most users put it (ignored by .gitignore)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        env = user_environment(venv, args.ci)
        for command in commands:
            print(f"\n=== command {command.number}: {command.line}", flush=True)
            log = root / f"command{command.number}.log"
            outcomes.append(run_command(command, clone, env, log, args.timeout))
            if outcomes[-1].exit_status != 0:
                break  # a user would stop here too
    finally:
        if args.keep:
            print(f"kept: {root}")
        else:
            for o in outcomes:  # the logs outlive the folder
                kept = Path(tempfile.gettempdir()) / f"{root.name}-{Path(o.log).name}"
                shutil.copy(o.log, kept)
                o.log = str(kept)
            shutil.rmtree(root, ignore_errors=True)
        print("\n" + report(outcomes, what, python))
        if args.json:
            args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")
    return 0 if outcomes and all(o.exit_status == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
