"""Renderings: the one table from format names to renderers that every report kind uses.

The run report, the fleet report, compare and history each declare one `Renderers`: the
kind (the word of its unknown-format error), its formats in order, the function of each
(loaded on first use, so that reading the names imports no renderer), and aliases
(``md`` for ``markdown``). A kind lists only the formats it has: no kind gets a format
here that it did not have. ``renderers.render(obj, fmt)`` renders; an unknown name is the
one `UsageError` ``unknown <kind> format 'X' (choose from a, b, c)``, the names listed
being the formats (with the aliases when `list_aliases`), or, with `fallback`, renders
that format instead (history's tables: the CLI's choices never pass an unknown name).
``renderers.names`` (each format, then its aliases) are the ``--format`` choices of the
command (`milabench.cli.common.add_render_options`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from milabench.errors import UsageError

T = TypeVar("T")


@dataclass(frozen=True)
class Renderers(Generic[T]):
    """The formats of one kind of report and how to render each (see the module doc)."""

    kind: str
    formats: tuple[str, ...]
    load: Callable[[], Mapping[str, Callable[[T], str]]]
    aliases: Mapping[str, str] = field(default_factory=dict)
    list_aliases: bool = False
    fallback: str | None = None

    def __post_init__(self) -> None:
        unknown = [a for a, target in self.aliases.items() if target not in self.formats]
        if unknown or (self.fallback is not None and self.fallback not in self.formats):
            raise ValueError(f"{self.kind}: alias or fallback of no format: {unknown}")

    @property
    def names(self) -> tuple[str, ...]:
        """Every accepted name: each format followed by its aliases (the CLI choices)."""
        out: list[str] = []
        for fmt in self.formats:
            out.append(fmt)
            out.extend(a for a, target in self.aliases.items() if target == fmt)
        return tuple(out)

    def resolve(self, fmt: str) -> str:
        """The format `fmt` names (an alias gives its format); an unknown name raises
        `error(fmt)`, or gives `fallback` when there is one."""
        if fmt in self.formats:
            return fmt
        if fmt in self.aliases:
            return self.aliases[fmt]
        if self.fallback is not None:
            return self.fallback
        raise self.error(fmt)

    def error(self, fmt: str) -> UsageError:
        """The unknown-format error of this kind."""
        listed = self.names if self.list_aliases else self.formats
        return UsageError(f"unknown {self.kind} format '{fmt}' (choose from {', '.join(listed)})")

    def render(self, obj: T, fmt: str = "text") -> str:
        """`obj` rendered in the format `fmt` names."""
        return self.load()[self.resolve(fmt)](obj)


__all__ = ["Renderers"]
