"""`load_suite`: the whole configuration pipeline, one step per module.

    read + include (document) -> matrix -> --override layer -> defaults + inherits + `*`
    -> name/group/... -> `${...}` interpolation -> dirs -> validation -> selection

Overrides are merged as the last file layer, after matrix expansion so that they can name
generated entries (``resnet50-bs64.argv.--lr=0.1``) and before inheritance so that they
behave exactly like a line written at the end of the suite file.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench.config.capabilities import REQUIRES, SuiteRequirement, suite_requirements
from milabench.config.document import Document, load_document
from milabench.config.entry import Entry, unknown_keys
from milabench.config.inherit import BUILTIN_DEFAULTS, resolve_all, suggest
from milabench.config.interpolate import (
    has_interpolation,
    overrides_layer,
    resolve_interpolations,
)
from milabench.config.matrix import expand_matrices
from milabench.config.merge import deep_merge, strip_markers
from milabench.config.select import select_entries
from milabench.config.system import load_system
from milabench.config.validate import validate_entry, warn_short_timeouts
from milabench.config.yamlio import DELETE
from milabench.errors import ConfigError

OVERRIDE_SOURCE = Path("--override")


@dataclass
class Suite:
    """A resolved suite: typed entries in run order, plus what the other layers need.

    `templates` (private ``_`` entries) stay plain mappings: they are never run.
    """

    entries: dict[str, Entry]
    all_entries: dict[str, Entry]
    system: dict[str, Any]
    base: Path
    config_path: Path
    templates: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    # what the whole suite needs of the machine (its `_requires` block, config.capabilities)
    requires: tuple[SuiteRequirement, ...] = ()

    def __iter__(self):
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)


def _apply_overrides(doc: Document, overrides: list[str]) -> None:
    layer = overrides_layer(overrides)
    for name, value in layer.items():
        if name not in doc.entries and name not in ("*", "_defaults", REQUIRES):
            raise ConfigError(
                f"--override {name}: no entry named '{name}'{suggest(name, doc.entries)}"
            )
        if not isinstance(value, dict) and value is not DELETE:
            raise ConfigError(f"--override {name}: expected {name}.<key>=<value>")
    doc.add_layer(layer, OVERRIDE_SOURCE)


def _fill_identity(
    name: str, entry: dict[str, Any], doc: Document, variant: str, suite_file: Path
) -> None:
    entry["name"] = name
    entry["tag"] = [name]
    if entry.get("group") is None:
        entry["group"] = name
    if entry.get("install_group") is None:
        entry["install_group"] = entry["group"]
    if entry.get("install_variant") is None:
        entry["install_variant"] = variant
    # The file where the entry itself was first written (a parent's file only served to
    # anchor the parent's own relative paths, already made absolute when it was read).
    origin = doc.origin.get(name)
    if origin is not None and origin != OVERRIDE_SOURCE:
        entry["config_file"] = str(Path(origin).absolute())
        entry["config_base"] = str(Path(origin).absolute().parent)
    # The suite the command loaded (`--config`): what a message's command line names.
    entry["suite_file"] = str(suite_file)


def _fill_dirs(entry: dict[str, Any], base: Path, use_current_env: bool) -> None:
    definition = entry.get("definition")
    if isinstance(definition, str):
        path = Path(os.path.expandvars(definition)).expanduser()
        if not path.is_absolute():
            path = Path(entry.get("config_base") or ".") / path
        entry["definition"] = os.path.normpath(path.absolute())
    group = str(entry.get("group"))
    dirs = {
        "base": str(base),
        "venv": str(base / "venv" / str(entry.get("install_group"))),
        "data": str(base / "data"),
        "runs": str(base / "runs"),
        "extra": str(base / "extra" / group),
        "cache": str(base / "cache"),
    }
    user_dirs = entry.get("dirs")
    if isinstance(user_dirs, dict):
        for key, value in user_dirs.items():
            if isinstance(value, str):
                path = Path(os.path.expandvars(value)).expanduser()
                dirs[key] = str(path if path.is_absolute() else base / path)
            elif value is not None:
                dirs[key] = value
    if isinstance(entry.get("definition"), str):
        dirs["code"] = entry["definition"]
    if use_current_env:
        dirs["venv"] = sys.prefix
    entry["dirs"] = dirs
    entry["use_current_env"] = bool(use_current_env)


def check_keys(entry: dict[str, Any], file_of, strict: bool) -> None:
    """Report the keys of `entry` that nothing reads, with the closest known one.

    Keys of the upstream format that load but do nothing here (`UPSTREAM_IGNORED`) are
    not reported: suites written for upstream must load unchanged and quietly.
    """
    for key, close in unknown_keys(entry):
        hint = f" (did you mean '{close}'?)" if close else ""
        what = f"unknown key{hint}; nothing reads it"
        if strict:
            raise ConfigError.at(file_of(key), entry["name"], key, what)
        warnings.warn(ConfigError.at(file_of(key), entry["name"], key, what).args[0],
                      UnknownKeyWarning, stacklevel=3)  # fmt: skip


class UnknownKeyWarning(UserWarning):
    """A key of an entry that no layer reads (a typo, most of the time)."""


def _describe(doc: Document):
    def describe(full_key: str) -> tuple[object, str | None, str | None]:
        parts = full_key.split(".")
        if parts and parts[0] == "packs" and len(parts) > 1:
            entry = parts[1]
            key = ".".join(parts[2:]) or None
            return doc.file_of(entry, parts[2] if len(parts) > 2 else None), entry, key
        return None, full_key or None, None

    return describe


def load_suite(
    config_path: str | Path,
    system: str | Path | dict | None = None,
    base: str | Path | None = None,
    select: list[str] | tuple[str, ...] = (),
    exclude: list[str] | tuple[str, ...] = (),
    overrides: list[str] | tuple[str, ...] = (),
    use_current_env: bool = False,
    strict: bool = False,
) -> Suite:
    """Read, resolve and select a suite (docs/config.md section 1).

    A key no layer reads (``max_durations``) is a warning with the closest known key, or
    a `ConfigError` with `strict`.
    """
    config_path = Path(config_path).expanduser().absolute()
    base_dir = Path(base or os.environ.get("MILABENCH_BASE") or "results").expanduser().absolute()
    system_conf = dict(system) if isinstance(system, dict) else load_system(system, base=base_dir)

    doc = load_document(config_path)
    expand_matrices(doc)
    if overrides:
        _apply_overrides(doc, list(overrides))

    suite_defaults = doc.entries.get("_defaults")
    defaults = deep_merge(
        BUILTIN_DEFAULTS, suite_defaults if isinstance(suite_defaults, dict) else {}
    )
    resolved = resolve_all(doc, defaults)

    arch = str(system_conf.get("arch") or "cpu")
    # An entry without install_variant gets the arch's, except on NVIDIA: the CUDA build
    # chosen for the node's driver (system.py, `milabench.machine.cudabuild`).
    variant = str((system_conf.get("cuda_build") or {}).get("variant") or arch)
    entries: dict[str, dict[str, Any]] = {}
    for name, entry in resolved.items():
        entry = strip_markers(entry)
        _fill_identity(name, entry, doc, variant, config_path)
        # Identity first: easier to read in `milabench resolve` output.
        entries[name] = {"name": name, "tag": entry.pop("tag"), **entry}

    document = {"system": system_conf, "packs": entries}
    if has_interpolation(document):
        document = resolve_interpolations(document, _describe(doc))
        system_conf, entries = document["system"], document["packs"]

    notes: dict[str, str] = {}
    for name, entry in entries.items():
        _fill_dirs(entry, base_dir, use_current_env)
        if not name.startswith("_"):
            note = validate_entry(entry, lambda key, _n=name: doc.file_of(_n, key))
            if note:
                notes[name] = note
            check_keys(entry, lambda key, _n=name: doc.file_of(_n, key), strict)

    all_entries = {
        name: e
        for name, e in entries.items()
        if not name.startswith("_") and isinstance(e.get("definition"), str) and e["definition"]
    }
    chosen = select_entries(all_entries, list(select), list(exclude))
    warn_short_timeouts({n: note for n, note in notes.items() if n in chosen})
    typed = {name: Entry.from_mapping(e) for name, e in all_entries.items()}
    return Suite(
        entries={name: typed[name] for name in chosen},
        all_entries=typed,
        system=system_conf,
        base=base_dir,
        config_path=config_path,
        templates={n: e for n, e in entries.items() if n.startswith("_")},
        requires=suite_requirements(
            doc.entries.get(REQUIRES),
            lambda name: doc.file_of(REQUIRES, name),
        ),
    )
