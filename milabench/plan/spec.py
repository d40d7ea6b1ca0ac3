"""The unit of execution: one process to start, as plain data.

A plan (see `milabench.plan.tree`) is only a way to compute a list of `ProcessSpec`s;
the runner (`milabench.execute.runner`) only knows how to start `ProcessSpec`s. Keeping
this record small and JSON-able is what lets `matrix` print plans and tests compare them
without starting anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from milabench.config.entry import Entry, as_entry


@dataclass
class ProcessSpec:
    """One process of a benchmark.

    ``env`` holds only the variables *added* to the orchestrator's environment (the runner
    merges them over ``os.environ``); ``node`` is None (or a local node) to run here, any
    other node is run over SSH by `milabench.remote`. ``data_channel`` is ``"fd"`` when the
    process gets a pipe announced by ``DATA_FD`` and ``"smuggle"`` when its records come
    hidden in standard output (launchers such as torchrun do not pass extra descriptors).
    """

    tag: list[str]
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "."
    node: dict | None = None
    data_channel: str = "fd"
    timeout: float = 600.0
    entry: Entry = field(default_factory=lambda: Entry(name=""))

    def __post_init__(self) -> None:
        # Tools (pip steps of `envs`) describe themselves with a small mapping.
        if not isinstance(self.entry, Entry):
            self.entry = as_entry(self.entry if isinstance(self.entry, Mapping) else {})

    @property
    def name(self) -> str:
        """File stem of this process's run files (``resnet50.D0``)."""
        return ".".join(self.tag)

    def evolve(self, **changes: Any) -> ProcessSpec:
        """A copy with some fields replaced (plan layers never mutate their input)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["entry"] = self.entry.as_dict()
        return out
