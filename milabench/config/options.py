"""The options tree (spec phases.md 1): ``MILABENCH_A_B_C`` > ``system.options.a.b.c`` > default.

Unlike a "first truthy value" lookup, an explicitly given value always wins, even when it
is falsy: ``MILABENCH_CPU_AUTO=0`` turns auto-tuning off although the system file turns it
on. Environment values are read as YAML scalars (``0``, ``false``, ``1.5``, ``text``).
An empty environment variable counts as not given.
"""

from __future__ import annotations

import os
import re
from typing import Any

_MISSING = object()
_SCALARS = {
    "true": True,
    "yes": True,
    "on": True,
    "false": False,
    "no": False,
    "off": False,
    "null": None,
    "~": None,
}


def env_name(option: str) -> str:
    """``cpu.n_workers`` -> ``MILABENCH_CPU_N_WORKERS``."""
    return "MILABENCH_" + re.sub(r"[^A-Za-z0-9]+", "_", option).upper()


def parse_scalar(text: str) -> Any:
    """A string read the way YAML reads a plain scalar (without importing a YAML parser)."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered in _SCALARS:
        return _SCALARS[lowered]
    for kind in (int, float):
        try:
            return kind(stripped)
        except ValueError:
            pass
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "'\"":
        return stripped[1:-1]
    return text


def _from_system(system: dict | None, option: str) -> Any:
    node: Any = (system or {}).get("options") or {}
    for part in option.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def get_option(system: dict | None, option: str, default: Any = None) -> Any:
    """The value of `option`: environment, then the system file, then `default`."""
    raw = os.environ.get(env_name(option))
    if raw is not None and raw.strip() != "":
        return parse_scalar(raw)
    value = _from_system(system, option)
    if value is _MISSING or value is None:
        return default
    return value


def get_bool(system: dict | None, option: str, default: bool = False) -> bool:
    """`get_option` read as a boolean (``"0"``, ``"off"`` and friends are false)."""
    value = get_option(system, option, default)
    if isinstance(value, str):
        return parse_scalar(value) not in (False, None, 0, "")
    return bool(value)
