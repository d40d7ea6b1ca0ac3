"""The options tree (docs/config.md "Options"): ``MILABENCH_A_B_C`` > ``system.options.a.b.c`` > default.

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


# Numeric options checked when the system is loaded: option -> (kind, lowest, highest).
# kind "int" is a whole number, "number" any number; a value outside the bounds (or of
# the wrong kind) is one `ConfigError` naming the option and where it was given.
NUMERIC_OPTIONS: dict[str, tuple[str, float, float | None]] = {
    "multinode.port": ("int", 1, 65535),
    "ssh.connect_timeout": ("number", 0, None),  # > 0: checked as exclusive below
    "run.memory_interval": ("number", 0, None),
    "cpu.n_workers": ("int", 0, None),  # 0: load data in the main process
    "cpu.min": ("int", 0, None),
    "cpu.max": ("int", 1, None),
    "cpu.total_count": ("int", 1, None),
    "cpu.reserved_cores": ("int", 0, None),
    "install.check_jobs": ("int", 1, None),  # 1: the import checks one after another
}
_EXCLUSIVE_ZERO = {"ssh.connect_timeout"}


def option_source(system: dict | None, option: str) -> str:
    """Where `option` was given: the environment variable, else the system file's key."""
    raw = os.environ.get(env_name(option))
    if raw is not None and raw.strip() != "":
        return f"environment variable {env_name(option)}"
    file = (system or {}).get("config_file")
    where = f"system.options.{option}"
    return f"{file}: {where}" if file else where


def checked_number(system: dict | None, option: str, default: Any) -> Any:
    """`get_option` for one of `NUMERIC_OPTIONS`: the value, or a `ConfigError` naming the
    option and its source (never a bare ValueError from ``int()``)."""
    from milabench.errors import ConfigError

    value = get_option(system, option, default)
    if value is None or value == default:
        return value
    kind, low, high = NUMERIC_OPTIONS[option]
    number = value
    if isinstance(value, str):
        number = parse_scalar(value)
    ok = isinstance(number, int | float) and not isinstance(number, bool)
    if ok and kind == "int":
        ok = isinstance(number, int) or (isinstance(number, float) and number.is_integer())
        number = int(number) if ok else number
    if ok:
        ok = number >= low and (high is None or number <= high)
        if option in _EXCLUSIVE_ZERO and number == 0:
            ok = False
    if ok:
        return number
    if kind == "int":
        want = (
            f"a whole number in {low:g}..{high:g}"
            if high is not None
            else ("a whole number >= 1" if low == 1 else f"a whole number >= {low:g}")
        )
    else:
        want = "a positive number" if option in _EXCLUSIVE_ZERO else f"a number >= {low:g}"
    raise ConfigError(f"{option_source(system, option)}: expected {want}, not {value!r}")


def check_numeric_options(system: dict | None) -> None:
    """Raise `ConfigError` for the first numeric option with an unusable value."""
    for option in NUMERIC_OPTIONS:
        checked_number(system, option, None)
