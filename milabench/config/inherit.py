"""Inheritance (docs/config.md "Inheritance"): defaults, `inherits` chains, then `*`.

Every entry starts from the defaults (built-in ones with the suite's `_defaults` merged
in), then its parents in order (each parent fully resolved first, a list merged left to
right), then itself; `*` is merged on top of all of them. Lists are replaced by a merge,
except `tags`, which are the sorted union of everything along the way.
"""

from __future__ import annotations

import difflib
from typing import Any

from milabench.config.merge import copy_data, deep_merge, is_append
from milabench.config.yamlio import DELETE
from milabench.errors import ConfigError

BUILTIN_DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "weight": 1.0,
    "num_machines": 1,
    "tags": [],
    "plan": {"method": "per_gpu"},
    "argv": {},
    "voir": {"options": {}},
    "validation": {},
    "env": {},
    "pip": {},
}

# `_requires` is the suite's own block (what it needs of the machine: config.capabilities).
SPECIAL = ("_defaults", "*", "_requires")


def suggest(name: str, candidates) -> str:
    """`` (did you mean 'x'?)`` when a close candidate exists, else ``""``."""
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def tag_set(value: Any, file: object, name: str) -> set[str]:
    """The tags written in one layer (a list, an ``{append: [...]}``, or nothing)."""
    if value is None or value is DELETE:
        return set()
    if is_append(value):
        value = value["append"]
    if isinstance(value, str):
        return {value}
    if not isinstance(value, list) or not all(isinstance(t, str | int | float) for t in value):
        raise ConfigError.at(file, name, "tags", "expected a list of strings")
    return {str(t) for t in value}


def resolve_all(doc, defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every entry of the document (except `_defaults` and `*`) with inheritance applied."""
    raw = {k: v for k, v in doc.entries.items() if v is not DELETE}
    resolved: dict[str, dict[str, Any]] = {}
    default_tags = tag_set(defaults.get("tags"), doc.file_of("_defaults"), "_defaults")

    def resolve(name: str, chain: list[str]) -> dict[str, Any]:
        if name in resolved:
            return resolved[name]
        entry = raw[name]
        file = doc.file_of(name, "inherits")
        parents = entry.get("inherits")
        if parents is None or parents is DELETE:
            parents = []
        elif isinstance(parents, str):
            parents = [parents]
        if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
            raise ConfigError.at(
                file, name, "inherits", "expected an entry name or a list of names"
            )
        base = copy_data(defaults)
        tags = set(default_tags)
        for parent in parents:
            if parent in chain or parent == name:
                cycle = (
                    " -> ".join([*chain[chain.index(parent) :], name, parent])
                    if (parent in chain)
                    else f"{name} -> {name}"
                )
                raise ConfigError.at(file, name, "inherits", f"inheritance cycle: {cycle}")
            if parent not in raw or parent == "*":
                names = [n for n in raw if n != "*"]
                raise ConfigError.at(
                    file, name, "inherits", f"no entry named '{parent}'{suggest(parent, names)}"
                )
            parent_entry = resolve(parent, [*chain, name])
            base = deep_merge(base, parent_entry)
            tags |= set(parent_entry.get("tags") or [])
        result = deep_merge(base, entry)
        tags |= tag_set(entry.get("tags"), doc.file_of(name, "tags"), name)
        result["tags"] = sorted(tags)
        resolved[name] = result
        return result

    for name in raw:
        if name not in SPECIAL:
            resolve(name, [])

    star = raw.get("*")
    out: dict[str, dict[str, Any]] = {}
    for name in raw:
        if name in SPECIAL:
            continue
        entry = resolved[name]
        if star:
            star_tags = tag_set(star.get("tags"), doc.file_of("*", "tags"), "*")
            entry = deep_merge(entry, {k: v for k, v in star.items() if k != "tags"})
            entry["tags"] = sorted(set(entry["tags"]) | star_tags)
        out[name] = entry
    return out
