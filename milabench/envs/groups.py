"""Install groups: the selected benchmarks that share one virtual environment.

Everything an install needs to know about a group is gathered here once, as data: the
environment's folder, the variant, the requirement files of its benchmarks (one per
benchmark folder, even when several entries share a folder), the constraints, the index
options, the key imports and whether voir is needed. `install`, `pin` and the input hash
all read this record, so they cannot disagree about what a group contains.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from milabench.config.entry import Entry, as_entry
from milabench.envs.constraints import (
    constraints_dir,
    constraints_file,
    entry_constraint_lines,
    entry_pip_args,
    read_directives,
    uv_spelling,
)
from milabench.errors import ConfigError


@dataclass
class InstallGroup:
    """One environment to build (see module docstring)."""

    name: str
    venv: Path
    variant: str
    arch: str
    entries: list[Entry]
    requirements: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    constraints: Path | None = None
    constraint_lines: list[str] = field(default_factory=list)
    index_args: list[str] = field(default_factory=list)  # pip's spelling
    torch_backend: str | None = None  # a --torch-backend directive (its URL in index_args)
    with_requirements: list[str] = field(default_factory=list)  # the variant's --with
    pip_args: list[str] = field(default_factory=list)
    key_imports: list[str] = field(default_factory=list)
    needs_voir: bool = False
    use_current_env: bool = False

    @property
    def python(self) -> Path:
        """The group's interpreter (the active one with ``--use-current-env``)."""
        if self.use_current_env:
            return Path(sys.executable)
        return self.venv / "bin" / "python"

    @property
    def benchmarks(self) -> list[str]:
        return [e.name for e in self.entries]

    @property
    def uv_index_args(self) -> list[str]:
        """`index_args` in uv's spelling: PyTorch's index of the ``--torch-backend``
        directive, when `index_args` names it, becomes ``--torch-backend <backend>``."""
        return uv_spelling(self.index_args, self.torch_backend)


def _requirements_for(pack, variant: str) -> tuple[Path | None, str | None]:
    """The requirement file of one benchmark folder, and a note when we fell back: the
    pinned ``requirements.<variant>.txt``, else the variant's own input
    ``requirements.<variant>.in`` (``jax[cuda12]`` where requirements.in says ``jax``),
    else ``requirements.in``, both unpinned."""
    wanted = Path(pack.requirements_file(variant))
    if wanted.is_file():
        return wanted, None
    unpinned = pack.pin_input(variant)
    if unpinned.is_file():
        return unpinned, f"{pack.name}: no {wanted.name}, installing {unpinned.name} unpinned"
    return None, None


def build_groups(
    entries: Mapping[str, Entry] | Iterable[Entry | Mapping[str, Any]], system: dict
) -> list[InstallGroup]:
    """The install groups of the selected entries, in suite order of first appearance."""
    from milabench.pack import load_pack

    values = [as_entry(e) for e in (entries.values() if isinstance(entries, Mapping) else entries)]
    arch = str(system.get("arch") or "cpu")
    folder = constraints_dir(system)
    groups: dict[str, InstallGroup] = {}
    seen_defs: dict[str, set[str]] = {}
    for entry in values:
        name = entry.install_group or entry.name
        variant = entry.install_variant or arch
        venv = entry.dirs.venv or Path("")
        group = groups.get(name)
        if group is None:
            group = groups[name] = InstallGroup(
                name=name,
                venv=venv,
                variant=variant,
                arch=arch,
                entries=[],
                use_current_env=entry.use_current_env,
            )
            seen_defs[name] = set()
        elif group.variant != variant:
            raise ConfigError.at(
                entry.config_file,
                entry.name,
                "install_variant",
                f"{variant!r} differs from {group.variant!r} used by the other benchmarks "
                f"of install group {name!r}",
            )
        group.entries.append(entry)
        pack = load_pack(entry, system)
        definition = str(Path(pack.definition).resolve())
        for module in pack.key_imports_for(variant):
            if module not in group.key_imports:
                group.key_imports.append(module)
        if pack.voirfile is not None:
            group.needs_voir = True
        if definition in seen_defs[name]:
            continue
        seen_defs[name].add(definition)
        req, note = _requirements_for(pack, variant)
        if req is not None:
            group.requirements.append(req)
        if note:
            group.notes.append(note)
    for group in groups.values():
        group.constraints = constraints_file(group.variant, arch, folder)
        directives = read_directives(group.constraints)
        group.index_args = directives.pip_index_args
        group.torch_backend = directives.torch_backend
        group.with_requirements = directives.with_requirements
        group.constraint_lines = entry_constraint_lines(group.entries)
        group.pip_args = entry_pip_args(group.entries)
        if not group.use_current_env and not str(group.venv):
            raise ConfigError(f"install group {group.name!r}: its entries have no dirs.venv")
    return list(groups.values())
