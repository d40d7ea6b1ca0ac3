"""OmegaConf `${...}` interpolation and `--override` dotlists.

OmegaConf takes about 0.3 s to import, so it is only imported when a document actually
contains ``${``: most suites never pay for it, and `milabench --help` never does.
Interpolation runs once, after inheritance, over ``{system: ..., packs: {...}}`` so that
absolute (``${system.arch}``) and relative (``${.name}``, ``${..group}``) references work.
"""

from __future__ import annotations

import re
from typing import Any

from milabench.config.merge import copy_data
from milabench.config.yamlio import parse_yaml
from milabench.errors import ConfigError


def has_interpolation(value: Any) -> bool:
    """True when some string (or key) in `value` contains ``${``."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(has_interpolation(k) or has_interpolation(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_interpolation(v) for v in value)
    return False


def resolve_interpolations(document: dict[str, Any], describe) -> dict[str, Any]:
    """`document` with every ``${...}`` resolved.

    `describe(full_key) -> (file, entry, key)` turns the dotted key of a failing node into
    the parts of a `ConfigError` message. Plain references (``${a.b}``, ``${.x}``,
    ``${..y}``) are resolved by `_FastResolver`, which gives OmegaConf's results without
    wrapping every value of the document in OmegaConf nodes (0.2 s for 50 entries);
    anything else (resolvers such as ``${oc.env:X}``, nesting, escapes) goes to OmegaConf.
    """
    fast = _FastResolver(document, describe)
    try:
        return fast.run()
    except _NotSimple:
        return resolve_with_omegaconf(document, describe)


def resolve_with_omegaconf(document: dict[str, Any], describe) -> dict[str, Any]:
    """Resolve with OmegaConf itself (the reference behaviour)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.create(document)
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        full_key = str(getattr(err, "full_key", "") or "")
        file, entry, key = describe(full_key)
        what = str(getattr(err, "msg", None) or err).splitlines()[0]
        raise ConfigError.at(file, entry, key, f"cannot interpolate: {what}") from None
    except (ValueError, TypeError, RecursionError) as err:
        raise ConfigError(f"cannot interpolate the configuration: {err}") from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], value parsed like a YAML scalar or flow value).

    Keys are split on dots only, so option names such as ``--batch-size`` work as
    segments: ``resnet50.argv.--batch-size=32``. ``key=!delete`` removes the key.
    """
    key, sep, text = item.partition("=")
    path = key.strip().split(".")
    if not sep or not key.strip() or any(p == "" for p in path):
        raise ConfigError(f"--override {item!r}: expected KEY=VALUE with a dotted key")
    if text.strip() == "":
        return path, ""
    try:
        value = parse_yaml(text, f"--override {item!r}")
    except ConfigError:
        value = text
    return path, value


def overrides_layer(items: list[str]) -> dict[str, Any]:
    """The mapping built from a list of dotlist overrides (later items win)."""
    from milabench.config.merge import deep_merge

    layer: dict[str, Any] = {}
    for item in items:
        path, value = parse_override(item)
        nested: Any = value
        for part in reversed(path):
            nested = {part: nested}
        layer = deep_merge(layer, nested)
    return layer


class _NotSimple(Exception):
    """The document uses interpolation features that only OmegaConf implements."""


_REF = re.compile(r"\$\{(\.*)([A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*)\}")
_ANY_REF = re.compile(r"\$\{")


class _FastResolver:
    """OmegaConf's semantics for plain dotted references, on plain dicts and lists.

    A string that is exactly one reference takes the referenced value (any type); a
    reference inside a longer string is replaced by ``str(value)``. ``${a.b}`` starts at
    the root; ``${.x}`` at the container holding the string, each further dot one level up.
    """

    def __init__(self, document: dict[str, Any], describe):
        self.root = document
        self.describe = describe
        self.active: set[tuple] = set()
        self.done: dict[tuple, Any] = {}

    def run(self) -> dict[str, Any]:
        self._check(self.root)
        return self._walk(self.root, ())

    def _check(self, value: Any) -> None:
        if isinstance(value, str):
            if "${" in value:
                rest = _REF.sub("", value)
                if _ANY_REF.search(rest) or "\\${" in value:
                    raise _NotSimple
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str) and "${" in k:
                    raise _NotSimple
                self._check(v)
        elif isinstance(value, list):
            for v in value:
                self._check(v)

    def _walk(self, value: Any, path: tuple) -> Any:
        if isinstance(value, dict):
            return {k: self._walk(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, str) and "${" in value:
            return self._string(value, path)
        return value

    def _fail(self, path: tuple, what: str):
        file, entry, key = self.describe(".".join(str(p) for p in path))
        return ConfigError.at(file, entry, key, f"cannot interpolate: {what}")

    def _lookup(self, ref_dots: str, ref: str, path: tuple) -> Any:
        """Value of the reference found in the string at `path`."""
        container = path[:-1]
        if ref_dots:
            up = len(ref_dots) - 1
            if up > len(container):
                raise self._fail(path, f"'{ref_dots}{ref}' goes above the document")
            start = container[: len(container) - up]
        else:
            start = ()
        target = (*start, *ref.split("."))
        node: Any = self.root
        for i, part in enumerate(target):
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                full = ".".join(str(p) for p in target[: i + 1])
                raise self._fail(path, f"Interpolation key '{full}' not found")
        key = tuple(str(p) for p in target)
        if key in self.done:
            return copy_data(self.done[key])
        if key in self.active:
            raise self._fail(path, f"recursive interpolation of '{'.'.join(key)}'")
        self.active.add(key)
        resolved = self._walk(node, target)
        self.active.discard(key)
        self.done[key] = resolved
        return copy_data(resolved)

    def _string(self, text: str, path: tuple) -> Any:
        whole = _REF.fullmatch(text)
        if whole:
            return self._lookup(whole.group(1), whole.group(2), path)

        def repl(m: re.Match) -> str:
            value = self._lookup(m.group(1), m.group(2), path)
            if isinstance(value, dict | list):
                raise _NotSimple
            return str(value)

        return _REF.sub(repl, text)
