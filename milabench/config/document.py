"""Reading a suite file with its includes into one mapping of raw entries.

`include` (a string or a list, relative to the including file) is expanded depth-first
before the file itself, so a file overrides what it includes. While each file is read,
its entries' relative `definition` paths are made absolute against that file's folder:
that is the only moment we still know which file a path was written in. The loader also
remembers which file last wrote each key of each entry, so that errors found much later
(an unknown parent, a bad plan method) can name the right file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench.config.merge import merge_value
from milabench.config.yamlio import DELETE, read_yaml
from milabench.errors import ConfigError


@dataclass
class Document:
    """Merged raw entries plus where each entry and key was written."""

    entries: dict[str, Any] = field(default_factory=dict)
    #: entry -> file that first wrote it
    origin: dict[str, Path] = field(default_factory=dict)
    #: (entry, key) -> file that last wrote that key
    key_origin: dict[tuple[str, str], Path] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    def file_of(self, entry: str, key: str | None = None) -> Path | None:
        """The best file to name in an error about `entry` (and `key`)."""
        if key is not None and (entry, key) in self.key_origin:
            return self.key_origin[(entry, key)]
        return self.origin.get(entry)

    def add_layer(self, layer: dict[str, Any], source: Path) -> None:
        """Merge one file's (or the command line's) entries on top."""
        for name, value in layer.items():
            self.origin.setdefault(name, source)
            if isinstance(value, dict):
                for key in value:
                    self.key_origin[(name, key)] = source
            if name in self.entries:
                self.entries[name] = merge_value(self.entries[name], value)
            else:
                self.entries[name] = merge_value(None, value)


def check_entry_name(name: object, file: object, key: str | None = None) -> str:
    """`name` if it can name an entry, else a ConfigError naming `file`.

    Entry names become run-file names and report rows, so they must be non-empty
    printable strings with no path separator.
    """
    if isinstance(name, str) and name.strip() and name.isprintable() and "/" not in name:
        return name
    raise ConfigError(
        f"{file}: {'' if key is None else key + ': '}entry name {name!r} must be a non-empty "
        "printable string without '/'"
    )


def display_path(path: Path) -> str:
    """A path as messages show it: relative when under the working directory."""
    try:
        return str(Path(path).absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_document(path: Path) -> Document:
    """Read `path` and its includes, depth-first, into one `Document`."""
    doc = Document()
    _load_into(doc, Path(path).expanduser().absolute(), stack=[], included_from=None)
    return doc


def _load_into(doc: Document, path: Path, stack: list[Path], included_from: object) -> None:
    real = path.resolve()
    if real in stack:
        cycle = " -> ".join(display_path(p) for p in [*stack[stack.index(real) :], real])
        raise ConfigError(f"{display_path(stack[-1])}: include: include cycle: {cycle}")
    shown = display_path(path)
    data = read_yaml(path, included_from=included_from, shown=shown)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{shown}: a suite file must be a mapping of entry names to entries, "
            f"not a {type(data).__name__}"
        )
    includes = data.pop("include", None)
    if includes is not None:
        if isinstance(includes, str):
            includes = [includes]
        if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
            raise ConfigError(f"{shown}: include: expected a path or a list of paths")
        for inc in includes:
            target = Path(os.path.expandvars(inc)).expanduser()
            if not target.is_absolute():
                target = path.parent / target
            target = Path(os.path.normpath(target))
            _load_into(doc, target, [*stack, real], included_from=f"{shown}")
    layer: dict[str, Any] = {}
    for name, entry in data.items():
        check_entry_name(name, shown)
        if entry is DELETE:
            layer[name] = DELETE
            continue
        if not isinstance(entry, dict):
            kind = "null" if entry is None else type(entry).__name__
            raise ConfigError.at(shown, name, None, f"an entry must be a mapping, not {kind}")
        layer[name] = _anchor_paths(entry, path)
        if isinstance(entry.get("job"), dict):
            layer[name]["job"] = _anchor_paths(entry["job"], path)
    doc.files.append(path)
    doc.add_layer(layer, Path(shown))


def _anchor_paths(entry: dict[str, Any], path: Path) -> dict[str, Any]:
    """Make `definition` absolute against the file that wrote it."""
    definition = entry.get("definition")
    if not isinstance(definition, str) or "${" in definition:
        return entry
    entry = dict(entry)
    target = Path(os.path.expandvars(definition)).expanduser()
    if not target.is_absolute():
        target = path.parent / target
    entry["definition"] = os.path.normpath(target)
    return entry
