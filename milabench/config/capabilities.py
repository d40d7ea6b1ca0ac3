"""`requires_capabilities`: boolean expressions over the system that gate an entry.

An entry such as ``requires_capabilities: ["len(nodes) >= 2"]`` is skipped (with the
failing expression as the recorded reason) on a system that cannot run it. Expressions
are evaluated by `milabench.config.safe_eval`: comparisons, ``and``/``or``/``not``,
arithmetic, ``len()``, subscripts, numbers and strings over the names ``nodes``, ``gpu``,
``cpu``, ``arch`` and ``system``; nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from milabench.config.entry import Entry, as_entry
from milabench.config.safe_eval import UnsafeExpression, evaluate
from milabench.errors import ConfigError

FUNCTIONS = {"len": len, "min": min, "max": max, "int": int, "float": float}


def requirements(value: Any, *, file: object = None, name: str | None = None) -> list[str]:
    """``requires_capabilities`` as a list (a single string counts as one); `file` and
    `name` locate the error when it is neither."""
    reqs = value or []
    if isinstance(reqs, str):
        reqs = [reqs]
    if not isinstance(reqs, list | tuple) or not all(isinstance(r, str) for r in reqs):
        raise ConfigError.at(file, name, "requires_capabilities", "expected a list of expressions")
    return list(reqs)


def capability_names(system: dict[str, Any]) -> dict[str, Any]:
    """The names an expression can use."""
    return {
        "nodes": list(system.get("nodes") or []),
        "gpu": dict(system.get("gpu") or {}),
        "cpu": dict(system.get("cpu") or {}),
        "arch": system.get("arch", "cpu"),
        "system": system,
    }


def unmet_requirement(entry: Entry | Mapping[str, Any], system: dict[str, Any]) -> str | None:
    """The first expression that is false on `system`, or None when all hold."""
    entry = as_entry(entry)
    names = capability_names(system)
    for text in entry.requires_capabilities:
        try:
            ok = evaluate(text, names, FUNCTIONS)
        except UnsafeExpression as err:
            raise ConfigError.at(
                entry.config_file,
                entry.name,
                "requires_capabilities",
                f"{text!r}: {err}",
            ) from None
        if not ok:
            return text
    return None
