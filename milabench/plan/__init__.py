"""Execution plans: pure data describing which processes a benchmark starts.

`build_plan(pack)` picks the builder registered for the entry's ``plan.method``
(dashes read as underscores). Builders take the `BenchmarkPackage` and return a
`PlanNode`; `milabench.remote` registers or overrides methods (``accelerate``,
multi-node) with `register_method` without editing this file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from milabench.errors import ConfigError
from milabench.plan.nodes import (
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
from milabench.plan.spec import ProcessSpec


class BenchmarkPackage(Protocol):
    """What a builder needs of a benchmark: `milabench.pack.BenchmarkPackage` has it
    (a protocol, so that this package does not import `milabench.pack`, which uses it)."""

    entry: dict

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
    _load_extensions()
    return sorted(_METHODS)


def method_name(entry: dict) -> str:
    plan = entry.get("plan") or {}
    return str(plan.get("method") or "per_gpu").replace("-", "_")


_extensions_loaded = False


def _load_extensions() -> None:
    """Let `milabench.remote` register its methods (accelerate, multi-node) if present."""
    global _extensions_loaded
    if _extensions_loaded:
        return
    _extensions_loaded = True
    try:
        import milabench.remote.plans  # noqa: F401
    except ModuleNotFoundError as err:
        if not (err.name or "").startswith("milabench.remote"):
            raise


def build_plan(pack: BenchmarkPackage) -> PlanNode:
    """The run plan of ``pack`` for its entry's ``plan.method``."""
    _load_extensions()
    name = method_name(pack.entry)
    builder = _METHODS.get(name)
    if builder is None:
        raise ConfigError.at(
            pack.entry.get("config_file"),
            pack.entry.get("name"),
            "plan.method",
            f"unknown plan method {name!r} (known: {', '.join(methods())})",
        )
    return builder(pack)


def _per_gpu(pack: BenchmarkPackage) -> PlanNode:
    return PerGPU(pack.command_node())


def _njobs(pack: BenchmarkPackage) -> PlanNode:
    n = (pack.entry.get("plan") or {}).get("n", 1)
    return NJobs(pack.command_node(), n)


def _torchrun(pack: BenchmarkPackage) -> PlanNode:
    return TorchRun(pack.command_node())


register_method("per_gpu", _per_gpu)
register_method("njobs", _njobs)
register_method("torchrun", _torchrun)
