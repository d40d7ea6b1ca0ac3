"""``milabench dev``: step inside a benchmark's environment, as a run would see it.

The process gets the orchestrator's environment plus every variable a run adds
(`milabench.plan.environment.benchmark_env` and the pack's `make_env`), works in the
benchmark's folder, and is either the user's ``$SHELL`` (interactive) or the given
command. The data channel (``DATA_FD``) is the runner's and is not set here: benchkit
then writes no records, unless ``MILABENCH_DATA_STDOUT=1`` prints them on standard output
(docs/run-data.md section 4).
"""

from __future__ import annotations

import difflib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from milabench.config.commands import entry_command
from milabench.config.entry import Entry
from milabench.errors import EnvironmentMissing, UsageError


def find_entry(name: str, entries: dict[str, Entry]) -> Entry:
    """The entry called ``name``; a usage error naming it and the candidates otherwise."""
    if name in entries:
        return entries[name]
    names = list(entries)
    close = difflib.get_close_matches(name, names, n=3)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    listed = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
    raise UsageError(f"no benchmark named {name!r}{hint}; candidates: {listed or 'none'}")


def dev_environment(entry: Entry, system: dict) -> tuple[dict[str, str], Path]:
    """The full environment and working folder of the benchmark's processes."""
    from milabench.pack import load_pack
    from milabench.plan.environment import benchmark_env

    pack = load_pack(entry, system)
    entry = pack.entry
    if not pack.use_current_env and not Path(pack.python).exists():
        raise EnvironmentMissing(
            f"{entry.name}: environment {pack.venv} is missing; run "
            f"`{entry_command('install', entry)}` first (or use --use-current-env)"
        )
    if not pack.use_current_env:
        from milabench.envs import is_installed

        if not is_installed(pack.venv):
            print(
                f"milabench dev: warning: {pack.venv} is not marked installed (its last "
                "install failed or did not finish)",
                file=sys.stderr,
            )
    env = dict(os.environ)
    env.update(benchmark_env(entry, system))
    env.update(pack.make_env())
    env["MILABENCH_DEV"] = entry.name
    return env, Path(pack.definition)


def default_shell(env: dict[str, str]) -> list[str]:
    """``$SHELL``, else bash, else sh."""
    shell = env.get("SHELL") or shutil.which("bash") or "/bin/sh"
    return [shell]


def run_in_env(argv: list[str], env: dict[str, str], cwd: Path) -> int:
    """Run ``argv`` in the foreground; the tool ignores Ctrl-C meanwhile (the child gets it).

    Returns the exit code (128 + N when the command died from signal N, like a shell).
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        try:
            proc = subprocess.Popen(argv, env=env, cwd=cwd)
        except FileNotFoundError:
            raise UsageError(f"command not found: {argv[0]}") from None
        code = proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    return 128 - code if code < 0 else code
