"""``milabench install``: build one validated environment per install group.

For each group, in suite order: when the input hash (`milabench.envs.marker`) matches
the marker, the group is "up to date" and nothing starts. Otherwise the marker is
removed, the environment (re)created when needed, the requirements installed
(`milabench.envs.backends`), benchkit and benchshared copied in, the key modules
imported, and only then the marker written. A failing group is reported with the line
that explains it, also kept in ``<base>/venv/<group>.install-failed.json`` for `run` and
`preflight`; the other groups are still installed and the caller exits non-zero. When
uv fails for a network cause (`milabench.envs.netcause`) the install is tried once with
pip. With ``--use-current-env`` the active interpreter is only checked, unless
``into_current_env`` asks to install into it; those checks only read, so they run side by
side (`check_current_envs`). Every step and rule: docs/environments.md "milabench install".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from milabench.envs import failure_path
from milabench.envs.backends import Backend, validate_spec
from milabench.envs.constraints import write_entry_constraints
from milabench.envs.groups import InstallGroup
from milabench.envs.helperlib import install_helpers
from milabench.envs.marker import (
    changed_inputs,
    input_hash,
    install_inputs,
    is_up_to_date,
    remove_marker,
    write_marker,
)
from milabench.envs.steps import StepResult, run_step, run_steps
from milabench.errors import EnvironmentMissing

INSTALLED = "installed"
UP_TO_DATE = "up to date"
FAILED = "failed"
CHECKED = "checked"

# At most this many import checks at once, whatever the number of CPUs.
CHECK_JOBS_CAP = 8


@dataclass
class GroupResult:
    """Outcome of one install group, for the summary table and the exit code."""

    group: str
    benchmarks: list[str]
    status: str
    seconds: float
    message: str = ""
    venv: str = ""
    notes: list[str] = field(default_factory=list)
    cause: str = ""  # the network cause of a failed install step, when there is one

    @property
    def failed(self) -> bool:
        return self.status == FAILED


def time_stamp() -> str:
    """``YYYY-MM-DD_HH-MM-SS`` as in run names (docs/run-data.md section 1)."""
    return time.strftime("%Y-%m-%d_%H-%M-%S")


class LogFolder:
    """``runs/<phase>.<time>/`` created on first use, with one `RunFileSink` for all steps.

    An install where every group is up to date starts no process and leaves no folder.
    """

    def __init__(self, runs: Path, phase: str) -> None:
        self.path = runs / f"{phase}.{time_stamp()}"
        self._sink = None

    def sinks(self) -> list:
        if self._sink is None:
            from milabench.sinks.runfiles import RunFileSink

            self.path.mkdir(parents=True, exist_ok=True)
            self._sink = RunFileSink(self.path)
        return [self._sink]

    @property
    def used(self) -> bool:
        return self._sink is not None

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()


def _is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file()


def _same_interpreter(venv: Path) -> bool:
    """The environment was made by this interpreter's version (``pyvenv.cfg``)."""
    try:
        text = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return False
    wanted = "{}.{}.{}".format(*sys.version_info[:3])
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("version", "version_info") and value.strip().startswith(wanted):
            return True
    return False


class Trash:
    """Deletes replaced environments in a background thread.

    Removing a torch environment (~18,000 files) takes seconds of I/O; a ``--force``
    install renames the old one aside instantly and deletes it while the new one is
    created and installed (mostly CPU work). `wait` is called before the command ends,
    so nothing outlives it; a folder left by an interrupted command is removed by the
    next ``--force`` of that group.
    """

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []

    def discard(self, venv: Path) -> None:
        """Move ``venv`` (and older leftovers) aside and delete them in the background."""
        doomed = sorted(venv.parent.glob(f"{venv.name}.trash-*"))
        if venv.exists():
            if not _is_venv(venv) and any(venv.iterdir()):
                raise EnvironmentMissing(
                    f"{venv}: exists but is not a virtual environment; move it away or "
                    "choose another --base"
                )
            aside = venv.with_name(f"{venv.name}.trash-{os.getpid()}-{time.time_ns()}")
            venv.rename(aside)
            doomed.append(aside)
        for path in doomed:
            thread = threading.Thread(
                target=shutil.rmtree, args=(path,), kwargs={"ignore_errors": True}, daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def wait(self) -> None:
        for thread in self._threads:
            thread.join()
        self._threads.clear()


_DISAGREE = re.compile(r"you require (\S+?)==\S+ and \1==")


def _record_failure(group: InstallGroup, result: GroupResult, logs: Path) -> None:
    if group.use_current_env:
        return
    record = {
        "group": group.name,
        "host": socket.gethostname(),
        "message": result.message,
        "cause": result.cause,
        "time": time.time(),
        "logs": str(logs),
    }
    path = failure_path(group.venv)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # the summary still says it; the record is a convenience for later commands


def _clear_failure(group: InstallGroup) -> None:
    if not group.use_current_env:
        failure_path(group.venv).unlink(missing_ok=True)


def _fail(group: InstallGroup, start: float, step: str, result: StepResult) -> GroupResult:
    why = result.explanation() if step == "install" else result.error
    message = f"{step}: {why}"
    if len(group.requirements) > 1 and _DISAGREE.search(result.error):
        message += " (hint: the group's files disagree; 'milabench pin' compiles them together)"
    cause = result.first.cause if result.first is not None else result.cause
    return GroupResult(
        group.name,
        group.benchmarks,
        FAILED,
        time.perf_counter() - start,
        message,
        str(group.venv),
        group.notes,
        cause=str(cause.label) if cause is not None and step == "install" else "",
    )


def _install_requirements(
    group: InstallGroup, backend: Backend, logs: LogFolder, echo: bool, say=print
) -> StepResult | None:
    """The pip/uv install step (None when the group has nothing to install).

    A uv failure with a network cause is tried once more with pip (module docstring);
    the result is then pip's, with uv's attempt as its ``first``.
    """
    extra = write_entry_constraints(
        group.constraint_lines, logs.path / f"{group.name}.constraints.txt"
    )
    spec = backend.install_spec(group, logs.path, extra)
    if spec is None:
        return None
    result = run_step(spec, logs.sinks(), echo=echo)
    if result.ok or result.cause is None or not backend.can_fall_back():
        return result
    fallback = backend.fallback_spec(group, logs.path, extra)
    if fallback is None:
        return result
    say(f"[{group.name}] uv: {result.cause}; trying pip once")
    second = run_step(fallback, logs.sinks(), echo=echo)
    second.first = result
    return second


def install_group(
    group: InstallGroup,
    backend: Backend,
    logs: LogFolder,
    *,
    force: bool = False,
    echo: bool = False,
    say=print,
    trash: Trash | None = None,
) -> GroupResult:
    """Install one group (see module docstring); never raises for a pip failure."""
    start = time.perf_counter()
    inputs = install_inputs(group)
    digest = input_hash(inputs)
    if not force and is_up_to_date(group, digest):
        return GroupResult(
            group.name,
            group.benchmarks,
            UP_TO_DATE,
            time.perf_counter() - start,
            venv=str(group.venv),
        )
    changed = changed_inputs(group, inputs)
    remove_marker(group)
    recreate = force or not group.python.exists() or not _same_interpreter(group.venv)
    why = f"; changed: {', '.join(changed)}" if changed and not force else ""
    say(
        f"[{group.name}] {'creating' if recreate else 'updating'} {group.venv} "
        f"({backend.name}{why})"
    )
    if recreate:
        if trash is None:
            trash = Trash()
            try:
                trash.discard(group.venv)
            finally:
                trash.wait()
        else:
            trash.discard(group.venv)
        group.venv.parent.mkdir(parents=True, exist_ok=True)
        result = run_step(backend.create_spec(group, logs.path), logs.sinks(), echo=echo)
        if not result.ok:
            return _failed(group, _fail(group, start, "create", result), logs)
    result = _install_requirements(group, backend, logs, echo, say)
    if result is not None and not result.ok:
        return _failed(group, _fail(group, start, "install", result), logs)
    install_helpers(group.venv)
    notes = list(group.notes)
    used = backend.name
    if result is not None and result.first is not None:
        used = "pip"
        notes.append(f"{group.name}: uv failed ({result.first.cause}); installed with pip")
    validated = run_step(validate_spec(group, logs.path), logs.sinks(), echo=echo)
    if not validated.ok:
        return _failed(group, _fail(group, start, "validate", validated), logs)
    seconds = time.perf_counter() - start
    write_marker(group, digest, inputs, used, seconds)
    _clear_failure(group)
    return GroupResult(
        group.name, group.benchmarks, INSTALLED, seconds, venv=str(group.venv), notes=notes
    )


def _failed(group: InstallGroup, result: GroupResult, logs: LogFolder) -> GroupResult:
    _record_failure(group, result, logs.path)
    return result


def check_current_env(
    group: InstallGroup,
    backend: Backend,
    logs: LogFolder,
    *,
    into_current_env: bool = False,
    echo: bool = False,
    say=print,
) -> GroupResult:
    """``--use-current-env``: check (and, only when asked, install into) this interpreter."""
    start = time.perf_counter()
    status = CHECKED
    if into_current_env:
        say(f"[{group.name}] installing into the current environment {sys.prefix}")
        result = _install_requirements(group, backend, logs, echo, say)
        if result is not None and not result.ok:
            return _fail(group, start, "install", result)
        status = INSTALLED
    result = run_step(validate_spec(group, logs.path), logs.sinks(), echo=echo)
    return _checked(group, status, result, time.perf_counter() - start)


def _checked(group: InstallGroup, status: str, result: StepResult, seconds: float) -> GroupResult:
    """The result of a group whose validation in this interpreter ended as ``result``."""
    if not result.ok:
        return replace(_fail(group, 0.0, "validate", result), seconds=seconds)
    return GroupResult(
        group.name, group.benchmarks, status, seconds, venv=sys.prefix, notes=group.notes
    )


def check_jobs(system: dict, count: int) -> int:
    """How many of ``count`` import checks run at once: option ``install.check_jobs``
    (``MILABENCH_INSTALL_CHECK_JOBS``; 1: one after another), else as many as there are
    groups, CPUs and at most `CHECK_JOBS_CAP`. Never more than ``count``, never 0."""
    from milabench.config.options import checked_number

    chosen = checked_number(system, "install.check_jobs", None)
    if chosen is None:
        chosen = min(os.cpu_count() or 1, CHECK_JOBS_CAP)
    return max(1, min(int(chosen), count))


def check_current_envs(
    groups: list[InstallGroup], logs: LogFolder, *, jobs: int, echo: bool = False
) -> list[GroupResult]:
    """``--use-current-env`` without installing: check every group's imports, ``jobs``
    at a time; results in the order of ``groups``.

    The checks only read the interpreter, so they can overlap (importing torch from a
    cold page cache takes seconds of waiting on the disk). Each group keeps its own run
    files (``<group>.data``, ``.stdout``, ``.stderr`` in the one log folder) and its own
    error line; echoed lines carry their group's name.
    """
    specs = [validate_spec(group, logs.path) for group in groups]
    steps = run_steps(specs, logs.sinks(), limit=jobs, echo=echo)
    return [
        _checked(group, CHECKED, step, step.seconds)
        for group, step in zip(groups, steps, strict=True)
    ]


def install_all(
    groups: list[InstallGroup],
    system: dict,
    runs: Path,
    *,
    force: bool = False,
    backend: str | Backend | None = None,
    into_current_env: bool = False,
    echo: bool = False,
    say=print,
) -> tuple[list[GroupResult], Path | None]:
    """Install every group (failures do not stop the others); returns results and logs.
    ``backend``: a back-end name, or a ready `Backend` (the offline install's). Groups
    that are only checked (`check_current_envs`) are checked side by side; installs run
    one after another: they write to environments."""
    from milabench.envs.backends import backend_name

    if isinstance(backend, Backend):
        chosen = backend
    else:
        chosen = Backend(backend or backend_name(system), system)
    logs = LogFolder(runs, "install")
    trash = Trash()
    results: list[GroupResult] = []
    only_checks = not into_current_env and all(group.use_current_env for group in groups)
    jobs = check_jobs(system, len(groups)) if only_checks else 1
    try:
        if jobs > 1:
            results = check_current_envs(groups, logs, jobs=jobs, echo=echo)
        else:
            for group in groups:
                if group.use_current_env:
                    res = check_current_env(
                        group, chosen, logs, into_current_env=into_current_env, echo=echo, say=say
                    )
                else:
                    res = install_group(
                        group, chosen, logs, force=force, echo=echo, say=say, trash=trash
                    )
                results.append(res)
    finally:
        logs.close()
        trash.wait()
    return results, (logs.path if logs.used else None)


def summary_table(results: list[GroupResult]) -> str:
    """One line per group: name, status, seconds, benchmarks and the error line."""
    rows = [("group", "status", "time", "benchmarks", "")]
    for r in results:
        benches = ", ".join(r.benchmarks)
        if len(benches) > 40:
            benches = benches[:37] + "..."
        rows.append((r.group, r.status, f"{r.seconds:.1f} s", benches, r.message))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(4)]
        lines.append(("  ".join(cells) + ("  " + row[4] if row[4] else "")).rstrip())
    return "\n".join(lines)


def describe_groups(groups: list[InstallGroup], root: Path | None = None) -> str:
    """What `install_all` would install, per group, for ``milabench install --dry-run``:
    the variant, the environment, each requirement file (and whether it is pinned), the
    constraints, the index options of each back-end, the ``--with`` requirements and the
    imports the validation checks. Paths under ``root`` are printed relative to it."""

    def show(path: Path | None) -> str:
        if path is None:
            return "-"
        if root is not None and path.is_relative_to(root):
            return str(path.relative_to(root))
        return str(path)

    lines = []
    for group in groups:
        lines.append(f"[{group.name}] variant {group.variant}, {show(group.venv)}")
        for req in group.requirements:
            kind = "pinned" if req.suffix == ".txt" else "unpinned"
            lines.append(f"  requirements: {show(req)} ({kind})")
        lines.append(f"  constraints: {show(group.constraints)}")
        if group.index_args or group.uv_index_args:
            lines.append(f"  indexes (uv): {' '.join(group.uv_index_args) or '-'}")
            lines.append(f"  indexes (pip): {' '.join(group.index_args) or '-'}")
        if group.with_requirements:
            lines.append(f"  with: {' '.join(group.with_requirements)}")
        lines.append(f"  imports: {', '.join(group.key_imports) or '-'}")
    return "\n".join(lines)
