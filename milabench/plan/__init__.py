"""Execution plans: pure data describing which processes a benchmark starts.

`build_plan(pack)` picks the builder registered for the entry's ``plan.method``
(dashes read as underscores). Builders take the `BenchmarkPackage` and return a
`PlanNode`. The method table below is the only list of methods: the configuration
checks names against it (`check_methods`, called by the command line right after the
suite is loaded), so a registered method can never be rejected, nor an unknown one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from milabench.config.document import display_path
from milabench.config.entry import Entry
from milabench.config.inherit import suggest
from milabench.errors import ConfigError
from milabench.plan.multinode import build_accelerate, build_torchrun
from milabench.plan.spec import ProcessSpec
from milabench.plan.tree import (
    Fixed,
    NJobs,
    PerGPU,
    PlanNode,
    Script,
    TorchRun,
    Voir,
    Wrapper,
    with_repeat,
)


class BenchmarkPackage(Protocol):
    """What a builder needs of a benchmark: `milabench.pack.BenchmarkPackage` has it
    (a protocol, so that this package does not import `milabench.pack`, which uses it)."""

    entry: Entry

    def command_node(self) -> PlanNode: ...


__all__ = [
    "Fixed",
    "NJobs",
    "PerGPU",
    "PlanNode",
    "ProcessSpec",
    "Script",
    "TorchRun",
    "Voir",
    "Wrapper",
    "build_plan",
    "check_methods",
    "method_name",
    "methods",
    "register_method",
    "with_repeat",
]

Builder = Callable[["BenchmarkPackage"], PlanNode]
_METHODS: dict[str, Builder] = {}


def register_method(name: str, builder: Builder) -> None:
    """Register (or replace) the builder for ``plan.method == name``."""
    _METHODS[name.replace("-", "_")] = builder


def methods() -> list[str]:
    """The plan methods a suite may name."""
    return sorted(_METHODS)


def method_name(entry: Entry) -> str:
    return entry.plan.method


def _unknown(entry: Entry) -> ConfigError:
    name = entry.plan.method
    return ConfigError.at(
        display_path(Path(entry.config_file)) if entry.config_file else None,
        entry.name,
        "plan.method",
        f"unknown method '{name}'{suggest(name, _METHODS)}; known: {', '.join(methods())}",
    )


def check_methods(entries: Iterable[Entry]) -> None:
    """`ConfigError` for the first entry whose ``plan.method`` has no builder."""
    for entry in entries:
        if entry.plan.method not in _METHODS:
            raise _unknown(entry)


def build_plan(pack: BenchmarkPackage) -> PlanNode:
    """The run plan of ``pack`` for its entry's ``plan.method``."""
    builder = _METHODS.get(method_name(pack.entry))
    if builder is None:
        raise _unknown(pack.entry)
    return builder(pack)


def _per_gpu(pack: BenchmarkPackage) -> PlanNode:
    return PerGPU(pack.command_node())


def _njobs(pack: BenchmarkPackage) -> PlanNode:
    n = pack.entry.plan.n
    return NJobs(pack.command_node(), 1 if n is None else n)


register_method("per_gpu", _per_gpu)
register_method("njobs", _njobs)
register_method("torchrun", build_torchrun)  # one node, or one launcher per node
register_method("multinode", build_torchrun)  # the same, for suites that want to say it
register_method("accelerate", build_accelerate)
