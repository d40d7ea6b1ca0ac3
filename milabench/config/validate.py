"""Checks on resolved entries, so that mistakes surface at load time with a clear message.

Run on every non-private entry after inheritance and interpolation: the values checked
here are the ones the planner and runner rely on (plan method, weight, durations, argv).
"""

from __future__ import annotations

from typing import Any

from milabench.config import PLAN_METHODS
from milabench.config.argv import argv_list
from milabench.config.capabilities import requirements
from milabench.config.inherit import suggest
from milabench.errors import ConfigError


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate_entry(entry: dict[str, Any], file_of) -> None:
    """Raise `ConfigError` for the first invalid field; normalises `plan.method` in place.

    `file_of(key)` names the file that wrote `key` of this entry.
    """
    name = entry["name"]

    def fail(key: str, what: str) -> ConfigError:
        return ConfigError.at(file_of(key.split(".")[0]), name, key, what)

    for key in ("enabled",):
        if not isinstance(entry.get(key), bool):
            raise fail(key, f"expected true or false, not {entry.get(key)!r}")
    if not _number(entry.get("weight")):
        raise fail("weight", f"expected a number, not {entry.get('weight')!r}")
    if not _number(entry.get("max_duration")) or entry["max_duration"] <= 0:
        raise fail(
            "max_duration",
            f"expected a positive number of seconds, not {entry.get('max_duration')!r}",
        )
    machines = entry.get("num_machines")
    if isinstance(machines, bool) or not isinstance(machines, int) or machines < 1:
        raise fail("num_machines", f"expected a whole number >= 1, not {machines!r}")
    for key in ("group", "install_group", "install_variant"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise fail(key, f"expected a non-empty string, not {entry.get(key)!r}")
    if "definition" in entry and entry["definition"] is not None:
        if not isinstance(entry["definition"], str):
            raise fail("definition", "expected a folder path")
    for key in ("env", "voir", "validation", "pip", "dirs"):
        if entry.get(key) is not None and not isinstance(entry[key], dict):
            raise fail(key, f"expected a mapping, not {type(entry[key]).__name__}")
    plan = entry.get("plan")
    if not isinstance(plan, dict):
        raise fail("plan", "expected a mapping such as {method: per_gpu}")
    method = plan.get("method", "per_gpu")
    if not isinstance(method, str):
        raise fail("plan.method", f"expected one of {', '.join(PLAN_METHODS)}")
    normalized = method.replace("-", "_")
    if normalized not in PLAN_METHODS:
        raise fail(
            "plan.method",
            f"unknown method '{method}'{suggest(normalized, PLAN_METHODS)}; "
            f"known: {', '.join(PLAN_METHODS)}",
        )
    plan["method"] = normalized
    if normalized == "njobs" and "n" in plan:
        n = plan["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise fail("plan.n", f"expected a whole number >= 1, not {n!r}")
    argv = entry.get("argv")
    if argv is not None and not isinstance(argv, list | dict):
        raise fail("argv", "expected a list or a mapping")
    # Checked with the file that wrote argv, which may differ from the definition's.
    argv_list({**entry, "config_file": file_of("argv")})
    requirements({**entry, "config_file": file_of("requires_capabilities")})
