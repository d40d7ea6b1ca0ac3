"""YAML reading for suite and system files.

A safe loader (never constructs Python objects) extended with the `!delete` tag, which
marks a key for removal during the merge. YAML problems become `ConfigError`s naming the
file, line and column, and loaded documents are normalised to plain JSON-like data so the
rest of the engine (merge, OmegaConf, JSON output) never meets dates, sets or bytes.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import yaml

from milabench.errors import ConfigError


class _Delete:
    """The value of a key tagged `!delete`: removes that key when merged."""

    _instance: _Delete | None = None

    def __new__(cls) -> _Delete:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DELETE"

    def __deepcopy__(self, memo: dict) -> _Delete:
        return self

    def __reduce__(self) -> str:
        return "DELETE"


DELETE = _Delete()

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SuiteLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Safe loader that understands `!delete` (on a scalar, mapping or sequence)."""


def _construct_delete(loader: yaml.Loader, node: yaml.Node) -> _Delete:
    return DELETE


SuiteLoader.add_constructor("!delete", _construct_delete)


def _problem(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    what = getattr(err, "problem", None) or str(err).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}"
    return str(what)


def parse_yaml(text: str, source: object) -> Any:
    """Parse one YAML document from text; `source` names it in error messages."""
    try:
        data = yaml.load(text, Loader=SuiteLoader)  # noqa: S506 - SuiteLoader is a safe loader
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: invalid YAML: {_problem(err)}") from err
    except (ValueError, TypeError, OverflowError, RecursionError, IndexError) as err:
        # The constructors can fail on valid syntax, e.g. an unhashable mapping key, or
        # IndexError for an empty `!!int`/`!!float` scalar.
        what = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(f"{source}: invalid YAML: {what}") from err
    return normalize(data, source)


def read_yaml(path: Path, *, included_from: object | None = None, shown: object = None) -> Any:
    """Read and parse a YAML file; a missing file names who asked for it.

    `shown` is how messages name the file (a path relative to the working directory).
    """
    shown = path if shown is None else shown
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        if included_from is not None:
            raise ConfigError(f"{included_from}: include: no such file '{shown}'") from err
        raise ConfigError(f"{shown}: no such file") from err
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise ConfigError(f"{shown}: cannot read: {err}") from err
    return parse_yaml(text, shown)


def normalize(data: Any, source: object, _path: tuple = ()) -> Any:
    """Plain data: str keys, dates as ISO strings; sets, bytes and cyclic aliases refused.

    Mapping keys that YAML typed as numbers or booleans become strings (an argv key `1:`
    means the text "1"). A recursive alias (`&a [*a]`) would make every later step loop.
    """
    return _norm(data, source, _path, set())


def _where(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "document"


# Deeper than any real suite; keeps every later recursive step (merge, interpolation,
# matrix substitution) far from Python's recursion limit.
MAX_DEPTH = 100


def _norm(data: Any, source: object, path: tuple, active: set[int]) -> Any:
    if len(path) > MAX_DEPTH and isinstance(data, dict | list):
        raise ConfigError(
            f"{source}: {_where(path[:3])}...: nested more than {MAX_DEPTH} levels deep"
        )
    if isinstance(data, dict):
        if id(data) in active:
            raise ConfigError(f"{source}: {_where(path)}: recursive YAML alias")
        active.add(id(data))
        out = {}
        for k, v in data.items():
            key = k if isinstance(k, str) else _key_text(k, source, path)
            out[key] = _norm(v, source, (*path, key), active)
        active.discard(id(data))
        return out
    if isinstance(data, list):
        if id(data) in active:
            raise ConfigError(f"{source}: {_where(path)}: recursive YAML alias")
        active.add(id(data))
        out_list = [_norm(v, source, (*path, i), active) for i, v in enumerate(data)]
        active.discard(id(data))
        return out_list
    if data is None or data is DELETE or isinstance(data, str | bool | int | float):
        return data
    if isinstance(data, datetime.date):
        return data.isoformat()
    raise ConfigError(
        f"{source}: {_where(path)}: unsupported YAML value of type {type(data).__name__}"
    )


def _key_text(key: Any, source: object, path: tuple) -> str:
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int | float):
        return str(key)
    if isinstance(key, datetime.date):
        return key.isoformat()
    raise ConfigError(f"{source}: {_where(path)}: unsupported mapping key {key!r}")
