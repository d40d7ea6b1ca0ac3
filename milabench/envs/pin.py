"""``milabench pin``: compile ``requirements.<arch>.txt`` files with ``uv pip compile``.

Benchmarks of one install group share one environment, so their pins must agree. For
each group we first compile a *group lock* from every benchmark's ``requirements.in``
together (plus ``constraints/<arch>.txt``), then compile each benchmark's own
``requirements.in`` with that lock as a constraint: each file lists only what its
benchmark needs, at the versions the whole group resolved to. The user's pip sources
are forwarded to uv as for install, and the arch's index directives are honoured.
The group lock is kept in the log folder ``runs/pin.<time>/<group>.lock.txt``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milabench.config.entry import Entry, as_entry
from milabench.envs.constraints import (
    constraints_dir,
    constraints_file,
    entry_constraint_lines,
    index_directives,
    write_entry_constraints,
)
from milabench.envs.install import LogFolder
from milabench.envs.pipconf import PipSettings, read_pip_settings
from milabench.envs.steps import run_step
from milabench.plan.spec import ProcessSpec


@dataclass
class PinResult:
    group: str
    ok: bool
    seconds: float
    written: list[Path]
    message: str = ""


@dataclass
class PinGroup:
    """The ``requirements.in`` files of one install group (one per benchmark folder)."""

    name: str
    entries: list[Entry]
    definitions: list[Path]


def pin_groups(
    entries: Mapping[str, Entry] | Iterable[Entry | Mapping[str, Any]],
) -> list[PinGroup]:
    """The selected entries grouped by install group, with their requirement folders."""
    values = [as_entry(e) for e in (entries.values() if isinstance(entries, Mapping) else entries)]
    groups: dict[str, PinGroup] = {}
    for entry in values:
        name = entry.install_group or entry.name
        group = groups.setdefault(name, PinGroup(name, [], []))
        group.entries.append(entry)
        definition = entry.code.resolve()
        if (definition / "requirements.in").is_file() and definition not in group.definitions:
            group.definitions.append(definition)
    return list(groups.values())


def compile_argv(
    inputs: list[str],
    output: Path,
    constraints: list[Path],
    index_args: list[str],
    pip: PipSettings,
    variant: str,
    strategy: str | None,
) -> list[str]:
    """``uv pip compile`` for this interpreter's Python version, with forwarded sources."""
    version = "{}.{}".format(*sys.version_info[:2])
    argv = [
        sys.executable,
        "-m",
        "uv",
        "pip",
        "compile",
        *inputs,
        "-o",
        str(output),
        "--python-version",
        version,
        *pip.index_strategy_args(strategy, index_args),
        "--custom-compile-command",
        f"milabench pin --variant {variant}",
        "--no-annotate",
    ]  # annotations would name the temporary group lock
    for path in constraints:
        argv += ["-c", str(path)]
    return argv + index_args + pip.uv_args()


def _spec(group: str, argv: list[str], cwd: Path, step: str, env: dict[str, str]) -> ProcessSpec:
    return ProcessSpec(
        tag=[group],
        argv=argv,
        env={"PYTHONUNBUFFERED": "1", **env},
        cwd=str(cwd),
        node=None,
        data_channel="fd",
        timeout=1800.0,
        entry={"name": group, "tag": [group], "phase": "pin", "step": step},
    )


def pin_all(
    entries, system: dict, runs: Path, *, variant: str | None = None, echo: bool = False, say=print
) -> tuple[list[PinResult], Path | None]:
    """Compile every group's lock then each benchmark's pinned file (see module doc)."""
    from milabench.config.options import get_option

    arch = str(system.get("arch") or "cpu")
    variant = variant or arch
    folder = constraints_dir(system)
    base_constraints = constraints_file(variant, arch, folder)
    index_args = index_directives(base_constraints)
    pip = read_pip_settings()
    strategy = get_option(system, "install.index_strategy", None)  # None: by the sources
    logs = LogFolder(runs, "pin")
    results: list[PinResult] = []
    try:
        for group in pin_groups(entries):
            start = time.perf_counter()
            written: list[Path] = []
            if not group.definitions:
                results.append(PinResult(group.name, True, 0.0, [], "no requirements.in"))
                continue
            sinks = logs.sinks()
            constraints = [base_constraints] if base_constraints else []
            extra = write_entry_constraints(
                entry_constraint_lines(group.entries), logs.path / f"{group.name}.constraints.txt"
            )
            if extra is not None:
                constraints.append(extra)
            lock = logs.path / f"{group.name}.lock.txt"
            say(f"[{group.name}] compiling the group lock")
            argv = compile_argv(
                [str(d / "requirements.in") for d in group.definitions],
                lock,
                constraints,
                index_args,
                pip,
                variant,
                strategy,
            )
            result = run_step(
                _spec(group.name, argv, logs.path, "lock", pip.uv_env()), sinks, echo=echo
            )
            if not result.ok:
                results.append(
                    PinResult(
                        group.name, False, time.perf_counter() - start, [], f"lock: {result.error}"
                    )
                )
                continue
            failure = ""
            for definition in group.definitions:
                output = definition / f"requirements.{variant}.txt"
                argv = compile_argv(
                    ["requirements.in"],
                    output,
                    [lock, *constraints],
                    index_args,
                    pip,
                    variant,
                    strategy,
                )
                result = run_step(
                    _spec(group.name, argv, definition, definition.name, pip.uv_env()),
                    sinks,
                    echo=echo,
                )
                if not result.ok:
                    failure = f"{definition.name}: {result.error}"
                    break
                written.append(output)
            results.append(
                PinResult(group.name, not failure, time.perf_counter() - start, written, failure)
            )
    finally:
        logs.close()
    return results, (logs.path if logs.used else None)
