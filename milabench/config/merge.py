"""Deep merge of configuration layers (docs/config.md "Layers").

Mappings merge recursively, lists and scalars are replaced. Two markers change that:
``{append: [...]}`` concatenates to the list below it, and a value tagged ``!delete``
removes the key. Markers that find nothing below them are kept in the result, because a
later merge (inheritance from a parent) may still have something for them to act on;
`strip_markers` turns what is left into plain data once every layer is merged.
"""

from __future__ import annotations

from typing import Any

from milabench.config.yamlio import DELETE


def is_append(value: Any) -> bool:
    """True for the ``{append: [...]}`` marker."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("append"), list)


def copy_data(value: Any) -> Any:
    """Deep copy of plain data (dicts, lists, scalars): much cheaper than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: copy_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_data(v) for v in value]
    return value


def merge_value(base: Any, over: Any) -> Any:
    """The value of `over` laid on top of `base` (neither is modified)."""
    if over is DELETE:
        return DELETE
    if is_append(over):
        if isinstance(base, list):
            return copy_data(base) + copy_data(over["append"])
        if is_append(base):
            return {"append": copy_data(base["append"]) + copy_data(over["append"])}
        return copy_data(over)
    if isinstance(over, dict) and isinstance(base, dict) and not is_append(base):
        return deep_merge(base, over)
    return copy_data(over)


def deep_merge(base: dict, over: dict) -> dict:
    """A new mapping: `over` merged on top of `base`, keys in first-seen order."""
    out = {k: copy_data(v) for k, v in base.items()}
    for key, value in over.items():
        if key in out:
            out[key] = merge_value(out[key], value)
        else:
            out[key] = merge_value(None, value) if value is not DELETE else DELETE
    return out


def strip_markers(value: Any) -> Any:
    """Plain data: keys marked `!delete` removed, leftover ``{append: x}`` read as ``x``."""
    if isinstance(value, dict):
        if is_append(value):
            return [strip_markers(v) for v in value["append"] if v is not DELETE]
        return {k: strip_markers(v) for k, v in value.items() if v is not DELETE}
    if isinstance(value, list):
        return [strip_markers(v) for v in value if v is not DELETE]
    return value
