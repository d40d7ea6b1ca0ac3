"""Selection of benchmarks by name, group, install group, tag or folder (docs/config.md "Selection")."""

from __future__ import annotations

import os
from typing import Any

from milabench.config.inherit import suggest
from milabench.errors import UsageError


def selection_keys(entry: dict[str, Any]) -> set[str]:
    """``{"*", name, group, install_group, tags..., basename(definition)}``."""
    keys = {"*", entry["name"], entry["group"], entry["install_group"], *entry.get("tags", [])}
    if entry.get("definition"):
        keys.add(os.path.basename(os.path.normpath(entry["definition"])))
    return {str(k) for k in keys}


def is_selectable(name: str, entry: dict[str, Any]) -> bool:
    """Enabled, not private, and with a definition."""
    return not name.startswith("_") and bool(entry.get("definition")) and entry["enabled"]


def select_entries(
    entries: dict[str, dict[str, Any]], select: list[str], exclude: list[str]
) -> dict[str, dict[str, Any]]:
    """The selectable entries matching `select` (all when empty) minus `exclude`, in order.

    A selection word that matches no benchmark at all (enabled or not) is a usage error:
    a typo must not quietly run nothing.
    """
    keys = {name: selection_keys(e) for name, e in entries.items()}
    known = set().union(*keys.values()) if keys else set()
    for word in [*select, *exclude]:
        if word not in known:
            raise UsageError(
                f"no benchmark, group, tag or folder named '{word}'{suggest(word, known)}"
            )
    wanted, unwanted = set(select), set(exclude)
    return {
        name: entry
        for name, entry in entries.items()
        if is_selectable(name, entry)
        and (not wanted or keys[name] & wanted)
        and not (keys[name] & unwanted)
    }
