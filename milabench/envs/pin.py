"""``milabench pin``: compile ``requirements.<variant>.txt`` files with ``uv pip compile``.

Benchmarks of one install group share one environment, so their pins must agree. For
each group a *group lock* is compiled from every benchmark's pin input together (plus
``constraints/<variant>.txt``), kept in ``runs/pin.<time>/<group>.lock.txt``; then each
benchmark's pin input is compiled with that lock as a constraint, so each file lists only
what its benchmark needs at the versions the whole group resolved to. The user's pip
sources and the variant's directives are honoured as for install. Re-pinning reproduces
the committed files: each output file and the union of the group's pins are uv's
preferences. Pin inputs and the procedure: docs/environments.md "milabench pin".
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
    Directives,
    constraints_dir,
    constraints_file,
    entry_constraint_lines,
    read_directives,
    write_entry_constraints,
)
from milabench.envs.install import LogFolder
from milabench.envs.pipconf import PipSettings, read_pip_settings
from milabench.envs.steps import StepResult, run_step
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


@dataclass(frozen=True)
class PinContext:
    """What every compile of one `pin_all` call shares: the variant, its constraints
    file and directives, pip's forwarded sources, the index strategy and the log folder."""

    variant: str
    base_constraints: Path | None
    directives: Directives
    index_args: list[str]
    pip: PipSettings
    strategy: str | None
    logs: LogFolder
    echo: bool

    def compile(
        self,
        group: str,
        inputs: list[str],
        output: Path,
        constraints: list[Path],
        cwd: Path,
        step: str,
        sinks: list,
    ) -> StepResult:
        """Run one ``uv pip compile`` of ``inputs`` into ``output``, logged as ``step``."""
        argv = compile_argv(
            inputs, output, constraints, self.index_args, self.pip, self.variant, self.strategy
        )
        spec = _spec(group, argv, cwd, step, self.pip.uv_env())
        return run_step(spec, sinks, echo=self.echo)


def pin_context(system: dict, runs: Path, variant: str | None, echo: bool) -> PinContext:
    """The shared settings of a pin run: ``variant`` defaults to the system's arch."""
    from milabench.config.options import get_option

    arch = str(system.get("arch") or "cpu")
    variant = variant or arch
    base_constraints = constraints_file(variant, arch, constraints_dir(system))
    directives = read_directives(base_constraints)
    return PinContext(
        variant=variant,
        base_constraints=base_constraints,
        directives=directives,
        index_args=directives.uv_index_args,
        pip=read_pip_settings(),
        strategy=get_option(system, "install.index_strategy", None),  # None: by the sources
        logs=LogFolder(runs, "pin"),
        echo=echo,
    )


def group_constraints(ctx: PinContext, group: PinGroup) -> list[Path]:
    """The variant's constraints file and the group's entry constraint lines (written to
    the log folder), in that order."""
    constraints = [ctx.base_constraints] if ctx.base_constraints else []
    extra = write_entry_constraints(
        entry_constraint_lines(group.entries), ctx.logs.path / f"{group.name}.constraints.txt"
    )
    if extra is not None:
        constraints.append(extra)
    return constraints


def with_inputs(ctx: PinContext) -> list[str]:
    """The variant's ``--with`` requirements as one more compile input (a file in the log
    folder), or none."""
    if not ctx.directives.with_requirements:
        return []
    with_file = ctx.logs.path / f"{ctx.variant}.with.in"
    with_file.write_text("".join(f"{r}\n" for r in ctx.directives.with_requirements))
    return [str(with_file)]


def compile_benchmarks(
    ctx: PinContext,
    group: PinGroup,
    sinks: list,
    constraints: list[Path],
    added: list[str],
    outputs: list[Path],
) -> tuple[list[Path], str]:
    """Each benchmark's pin input compiled against the group lock (first in
    ``constraints``): the files written, and the first failure ("" when none)."""
    written: list[Path] = []
    for source, output in zip(group.inputs, outputs, strict=True):
        definition = source.parent
        result = ctx.compile(
            group.name,
            [source.name, *added],
            output,
            constraints,
            definition,
            definition.name,
            sinks,
        )
        if not result.ok:
            return written, f"{definition.name}: {result.error}"
        written.append(output)
    return written, ""


def pin_group(ctx: PinContext, group: PinGroup, say=print) -> PinResult:
    """Compile one group's lock, then each of its benchmarks' pinned files."""
    start = time.perf_counter()
    if not group.inputs:
        return PinResult(group.name, True, 0.0, [], "no requirements.in")
    sinks = ctx.logs.sinks()
    constraints = group_constraints(ctx, group)
    added = with_inputs(ctx)
    outputs = [d / f"requirements.{ctx.variant}.txt" for d in group.definitions]
    lock = ctx.logs.path / f"{group.name}.lock.txt"
    seed_lock(lock, outputs)
    say(f"[{group.name}] compiling the group lock")
    inputs = [str(p) for p in group.inputs] + added
    result = ctx.compile(group.name, inputs, lock, constraints, ctx.logs.path, "lock", sinks)
    if not result.ok:
        seconds = time.perf_counter() - start
        return PinResult(group.name, False, seconds, [], f"lock: {result.error}")
    written, failure = compile_benchmarks(ctx, group, sinks, [lock, *constraints], added, outputs)
    return PinResult(group.name, not failure, time.perf_counter() - start, written, failure)


def pin_all(
    entries, system: dict, runs: Path, *, variant: str | None = None, echo: bool = False, say=print
) -> tuple[list[PinResult], Path | None]:
    """Compile every group's lock then each benchmark's pinned file (see module doc); the
    results per group, and the log folder when a compile ran."""
    ctx = pin_context(system, runs, variant, echo)
    results: list[PinResult] = []
    try:
        for group in pin_groups(entries, ctx.variant, system):
            results.append(pin_group(ctx, group, say))
    finally:
        ctx.logs.close()
    return results, (ctx.logs.path if ctx.logs.used else None)
