"""``milabench pin``: compile ``requirements.<variant>.txt`` files with ``uv pip compile``.

Benchmarks of one install group share one environment, so their pins must agree. For
each group we first compile a *group lock* from every benchmark's pin input together
(plus ``constraints/<variant>.txt``), then compile each benchmark's own input with that
lock as a constraint: each file lists only what its benchmark needs, at the versions the
whole group resolved to. A benchmark's pin input is its ``requirements.<variant>.in`` when
it has one, else its ``requirements.in`` (`milabench.pack.BenchmarkPackage.pin_input`);
the variant's ``--with`` directives (``nvidia-ml-py`` for CUDA) are an input of every
compile. The user's pip sources are forwarded to uv as for install, and the variant's
index directives are honoured (``--torch-backend`` in uv's spelling).

Re-pinning reproduces the committed files: uv prefers the versions already in an output
file, so each benchmark's file is its own preference, and the group lock starts from the
union of the group's pinned files: a version changes only when the inputs exclude it.
The group lock is kept in the log folder ``runs/pin.<time>/<group>.lock.txt``.
"""

from __future__ import annotations

import re
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
    read_directives,
    write_entry_constraints,
)
from milabench.envs.install import LogFolder
from milabench.envs.pipconf import PipSettings, read_pip_settings
from milabench.envs.steps import run_step
from milabench.plan.spec import ProcessSpec

_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==\S+")


@dataclass
class PinResult:
    group: str
    ok: bool
    seconds: float
    written: list[Path]
    message: str = ""


@dataclass
class PinGroup:
    """The pin inputs of one install group (one per benchmark folder)."""

    name: str
    entries: list[Entry]
    inputs: list[Path]  # <folder>/requirements.<variant>.in or <folder>/requirements.in

    @property
    def definitions(self) -> list[Path]:
        return [path.parent for path in self.inputs]


def pin_groups(
    entries: Mapping[str, Entry] | Iterable[Entry | Mapping[str, Any]],
    variant: str = "cpu",
    system: dict | None = None,
) -> list[PinGroup]:
    """The selected entries grouped by install group, with each folder's pin input."""
    from milabench.pack import load_pack

    values = [as_entry(e) for e in (entries.values() if isinstance(entries, Mapping) else entries)]
    groups: dict[str, PinGroup] = {}
    for entry in values:
        name = entry.install_group or entry.name
        group = groups.setdefault(name, PinGroup(name, [], []))
        group.entries.append(entry)
        definition = entry.code.resolve()
        if not (definition / "requirements.in").is_file():
            continue
        source = load_pack(entry, system or {}).pin_input(variant)
        source = definition / source.name  # the folder resolved once, like `definition`
        if source not in group.inputs:
            group.inputs.append(source)
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
    """``uv pip compile`` for this interpreter's Python version, with forwarded sources;
    ``index_args`` in uv's spelling."""
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


def seed_lock(lock: Path, pinned: list[Path]) -> None:
    """Start the group lock from the pins the group's files already have (the first file
    naming a package wins), so that uv keeps them as preferences."""
    lines: dict[str, str] = {}
    for path in pinned:
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            found = _PINNED.match(line.strip())
            if found:
                lines.setdefault(found.group(1).lower(), line.strip())
    if lines:
        lock.write_text("".join(f"{line}\n" for line in lines.values()), encoding="utf-8")


def pin_all(
    entries, system: dict, runs: Path, *, variant: str | None = None, echo: bool = False, say=print
) -> tuple[list[PinResult], Path | None]:
    """Compile every group's lock then each benchmark's pinned file (see module doc)."""
    from milabench.config.options import get_option

    arch = str(system.get("arch") or "cpu")
    variant = variant or arch
    folder = constraints_dir(system)
    base_constraints = constraints_file(variant, arch, folder)
    directives = read_directives(base_constraints)
    index_args = directives.uv_index_args
    pip = read_pip_settings()
    strategy = get_option(system, "install.index_strategy", None)  # None: by the sources
    logs = LogFolder(runs, "pin")
    results: list[PinResult] = []
    try:
        for group in pin_groups(entries, variant, system):
            start = time.perf_counter()
            written: list[Path] = []
            if not group.inputs:
                results.append(PinResult(group.name, True, 0.0, [], "no requirements.in"))
                continue
            sinks = logs.sinks()
            constraints = [base_constraints] if base_constraints else []
            extra = write_entry_constraints(
                entry_constraint_lines(group.entries), logs.path / f"{group.name}.constraints.txt"
            )
            if extra is not None:
                constraints.append(extra)
            added: list[str] = []
            if directives.with_requirements:
                with_file = logs.path / f"{variant}.with.in"
                with_file.write_text("".join(f"{r}\n" for r in directives.with_requirements))
                added = [str(with_file)]
            outputs = [d / f"requirements.{variant}.txt" for d in group.definitions]
            lock = logs.path / f"{group.name}.lock.txt"
            seed_lock(lock, outputs)
            say(f"[{group.name}] compiling the group lock")
            argv = compile_argv(
                [str(p) for p in group.inputs] + added,
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
            for source, output in zip(group.inputs, outputs, strict=True):
                definition = source.parent
                argv = compile_argv(
                    [source.name, *added],
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
