"""Composable command nodes: every layer adds only its own argv, environment and options.

A plan is a small tree::

    Script (python main.py args)
      -> Voir (voir --stop 60 ... main.py args, VOIRFILE=...)
        -> PerGPU / NJobs (fan-out, one process per device or job)
        or TorchRun (one launcher starting several workers)
        or a Wrapper subclass (the per-node launchers of `milabench.plan.multinode`)

Each node computes `ProcessSpec`s from its inner node's specs with `specs(device)`
(``device``: the accelerator a fan-out layer restricts the inner command to; None: all).
Nothing here starts a process (SSH and Docker are applied when a spec starts on another
node, `milabench.remote.launcher`), so `milabench matrix` prints a plan and tests compare it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchkit.options import parse_measure
from milabench.config.entry import Entry, as_entry
from milabench.config.placeholders import resolve_argv as _resolve
from milabench.config.placeholders import resolve_text
from milabench.errors import ConfigError
from milabench.plan.environment import benchmark_env, device_indices, gpu_count
from milabench.plan.spec import ProcessSpec


def resolve_argv(argv: list[str], entry: Entry, system: dict, device: int | None) -> list[str]:
    """Brace placeholders resolved by the config engine (`milabench.config.placeholders`)."""
    return _resolve([str(a) for a in argv], entry, system, device=device)


def entry_working_dir(entry: Entry | Mapping[str, Any], system: dict | None = None) -> str:
    """The working directory of the entry's processes (absolute when the definition is).

    The entry's ``working_dir`` with its brace placeholders (``{milabench_extra}``...)
    resolved like argv, relative to the definition folder; the definition folder itself
    when the entry has none.
    """
    entry = as_entry(entry)
    definition = str(entry.code)
    value = entry.working_dir
    if not value:
        return definition
    text = resolve_text(value, entry, system or {}, key="working_dir")
    path = Path(os.path.expandvars(text)).expanduser()
    if not path.is_absolute():
        path = Path(definition) / path
    return os.path.normpath(path)


def entry_tag(entry: Entry) -> list[str]:
    return list(entry.tag)


DEFAULT_TIMEOUT = 600.0  # an entry with neither max_duration nor a time window


def entry_timeout(entry: Entry) -> float:
    """The process timeout: the entry's ``max_duration`` when it sets one, else derived
    from its measurement budget (start-up margin + warm-up + window, docs/measurement.md)
    so that a slow machine ends its window, with what it measured, before the timeout."""
    if entry.max_duration is not None:
        return entry.max_duration
    try:
        derived = parse_measure(dict(entry.measure) if entry.measure else None).timeout
    except ValueError:
        derived = 0.0  # reported by the config validation; never a crash here
    return derived or DEFAULT_TIMEOUT


class PlanNode:
    """Base of every node: `specs(device)` gives the processes, `processes()` the plan's."""

    entry: Entry
    system: dict

    def specs(self, device: int | None = None) -> list[ProcessSpec]:
        raise NotImplementedError

    def processes(self) -> list[ProcessSpec]:
        """Every process this plan starts (what the runner and `matrix` consume)."""
        return self.specs(None)

    def describe(self) -> str:
        return type(self).__name__


class Script(PlanNode):
    """``<python> <script> <argv...>`` in the entry's working directory with its variables.

    The working directory is ``cwd`` when given, else `entry_working_dir` (the entry's
    ``working_dir``, by default the benchmark's folder); `BenchmarkPackage.script_node`
    always passes an absolute ``script`` so that it does not depend on it.

    ``argv`` is the assembled argument list *before* placeholder resolution: placeholders
    such as ``{cpu_per_gpu}`` or ``{device}`` depend on the device the process gets, so
    they are resolved here, per process.
    """

    def __init__(
        self,
        entry: Entry | Mapping[str, Any],
        system: dict,
        script: str | Path,
        argv: list[str] | None = None,
        *,
        python: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        tag: list[str] | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        self.entry = entry = as_entry(entry)
        self.system = system
        self.script = str(script)
        self.argv = list(argv or [])
        self.python = str(python or entry.python)
        self.env = dict(env or {})
        self.tag = list(tag) if tag is not None else entry_tag(entry)
        self.cwd = str(cwd or entry_working_dir(entry, system))

    def specs(self, device: int | None = None) -> list[ProcessSpec]:
        env = benchmark_env(self.entry, self.system, device)
        env.update(self.env)
        argv = resolve_argv(self.argv, self.entry, self.system, device)
        return [
            ProcessSpec(
                tag=list(self.tag),
                argv=[self.python, self.script, *argv],
                env=env,
                cwd=self.cwd,
                node=None,
                data_channel="fd",
                timeout=entry_timeout(self.entry),
                entry=self.entry,
            )
        ]


def voir_flags(options: Mapping[str, Any] | None) -> list[str]:
    """``{stop: 60, gpu_poll: 1, dash: true, x: null}`` -> ``--stop 60 --gpu-poll 1 --dash``."""
    flags: list[str] = []
    for key, value in (options or {}).items():
        if value is None or value is False:
            continue
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            flags.append(flag)
        elif isinstance(value, list | tuple):
            flags += [flag, ",".join(str(v) for v in value)]
        else:
            flags += [flag, str(value)]
    return flags


class Voir(PlanNode):
    """Run the inner script under ``voir`` with the entry's ``voir.options``.

    The interpreter of the inner command is replaced by ``<venv>/bin/voir``, which loads
    ``VOIRFILE`` (the benchmark's ``voirfile.py``) and reports through ``DATA_FD``.
    """

    def __init__(
        self,
        inner: PlanNode,
        *,
        voirfile: str | Path | None,
        options: Mapping[str, Any] | None = None,
        executable: str | Path | None = None,
    ) -> None:
        self.inner = inner
        self.entry = inner.entry
        self.system = inner.system
        self.voirfile = str(voirfile) if voirfile else None
        if options is None:
            options = self.entry.voir_options
        self.options = dict(options)
        self.executable = str(executable or self.entry.bindir / "voir")

    def specs(self, device: int | None = None) -> list[ProcessSpec]:
        out = []
        for spec in self.inner.specs(device):
            env = dict(spec.env)
            if self.voirfile:
                env["VOIRFILE"] = self.voirfile
            argv = [self.executable, *voir_flags(self.options), *spec.argv[1:]]
            out.append(spec.evolve(argv=argv, env=env))
        return out


class PerGPU(PlanNode):
    """One process per visible device, each restricted to it; tag ``D<index>``.

    Without accelerators there is still one process, ``D0``.
    """

    def __init__(self, inner: PlanNode) -> None:
        self.inner = inner
        self.entry = inner.entry
        self.system = inner.system

    def specs(self, device: int | None = None) -> list[ProcessSpec]:
        devices = [device] if device is not None else device_indices(self.system)
        if not devices:
            return [
                s.evolve(tag=[*s.tag, "D0"])
                for s in self.inner.specs(0 if device is None else device)
            ]
        out = []
        for index in devices:
            out += [s.evolve(tag=[*s.tag, f"D{index}"]) for s in self.inner.specs(index)]
        return out


class NJobs(PlanNode):
    """``n`` copies of the inner command that all see every device; tags ``0..n-1``."""

    def __init__(self, inner: PlanNode, n: int) -> None:
        self.inner = inner
        self.entry = inner.entry
        self.system = inner.system
        self.n = plan_count(self.entry, "n", n)

    def specs(self, device: int | None = None) -> list[ProcessSpec]:
        out = []
        for job in range(self.n):
            out += [s.evolve(tag=[*s.tag, str(job)]) for s in self.inner.specs(device)]
        return out


def plan_count(entry: Entry, key: str, value: Any) -> int:
    """``plan.<key>`` (``n``, ``nproc``) as a whole number >= 1, else a `ConfigError`
    naming the entry (validation catches this at load time; this guards direct callers)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value  # the rule of `config.validate` (which reports it at load time)
    raise ConfigError.at(
        entry.config_file,
        entry.name,
        f"plan.{key}",
        f"expected a whole number >= 1, not {value!r}",
    )


def default_nproc(entry: Entry, system: dict) -> int:
    """Workers per node: ``plan.nproc`` if set, else the device count, else 2 on CPU."""
    nproc = entry.plan.nproc
    if nproc is not None:
        return plan_count(entry, "nproc", nproc)
    return gpu_count(system) or 2


class TorchRun(PlanNode):
    """One ``torchrun`` launcher on this node starting ``nproc`` workers.

    Workers do not inherit extra descriptors from torchrun, so their records come
    smuggled in standard output (``data_channel="smuggle"``, ``DATA_FD=1``). When the
    inner command is not a python script (e.g. voir), ``--no-python`` is used.
    """

    def __init__(
        self,
        inner: PlanNode,
        *,
        nproc: int | None = None,
        executable: str | Path | None = None,
        standalone: bool = True,
        extra_args: list[str] | None = None,
    ) -> None:
        self.inner = inner
        self.entry = inner.entry
        self.system = inner.system
        self.nproc = (
            plan_count(self.entry, "nproc", nproc)
            if nproc is not None
            else default_nproc(self.entry, self.system)
        )
        self.executable = str(executable or self.entry.bindir / "torchrun")
        self.standalone = standalone
        self.extra_args = list(extra_args or [])

    def launcher_args(self) -> list[str]:
        args = [f"--nproc-per-node={self.nproc}", "--nnodes=1"]
        if self.standalone:
            args.append("--standalone")
        return args + self.extra_args

    def specs(self, device: int | None = None) -> list[ProcessSpec]:
        out = []
        for spec in self.inner.specs(device):
            program = spec.argv
            if Path(program[0]).name.startswith("python"):
                program = program[1:]
            else:
                program = ["--no-python", *program]
            argv = [self.executable, *self.launcher_args(), *program]
            out.append(spec.evolve(argv=argv, data_channel="smuggle"))
        return out


class Wrapper(PlanNode):
    """Extension point: a layer that rewrites each spec of its inner node.

    Subclasses (the multi-node launchers of `milabench.plan.multinode`) override
    `wrap(spec)` and return one spec or a list of specs (e.g. one per node); they must
    only add their own argv/env, never drop the inner command's.
    """

    def __init__(self, inner: PlanNode) -> None:
        self.inner = inner
        self.entry = inner.entry
        self.system = inner.system

    def wrap(self, spec: ProcessSpec) -> ProcessSpec | list[ProcessSpec]:
        return spec

    def specs(self, device: int | None = None) -> list[ProcessSpec]:
        out: list[ProcessSpec] = []
        for spec in self.inner.specs(device):
            wrapped = self.wrap(spec)
            out += wrapped if isinstance(wrapped, list) else [wrapped]
        return out


class Fixed(PlanNode):
    """A plan made of already-built specs (tests, tools, `envs` pip commands)."""

    def __init__(
        self,
        specs: list[ProcessSpec],
        entry: Entry | Mapping[str, Any] | None = None,
        system: dict | None = None,
    ) -> None:
        self._specs = list(specs)
        if entry is None:
            entry = specs[0].entry if specs and specs[0].entry is not None else Entry(name="")
        self.entry = as_entry(entry)
        self.system = system or {}

    def specs(self, device: int | None = None) -> list[ProcessSpec]:
        return list(self._specs)


def with_repeat(specs: list[ProcessSpec], k: int) -> list[ProcessSpec]:
    """Tags of the ``k``-th repetition: ``R<k>`` right after the benchmark name."""
    return [s.evolve(tag=[s.tag[0], f"R{k}", *s.tag[1:]]) for s in specs]
