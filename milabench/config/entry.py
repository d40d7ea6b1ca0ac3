"""The typed benchmark entry: the one object the layers after the loader read.

`load_suite` resolves a suite into plain mappings, validates them (`validate.py`, errors
naming file/entry/key), then calls `Entry.from_mapping` on each: the only place where
keys become fields. Everything downstream reads fields such as ``entry.venv`` or
``entry.plan.nproc``, so a default or a path rule lives in exactly one place.
`Entry.raw` keeps the resolved mapping (what a benchmark receives and the run files
record), so keys not modelled here travel unchanged. Records read back from run files go
through the same `from_mapping`: missing keys take the defaults below. Why frozen stdlib
dataclasses: the typed-entries paragraph of docs/architecture.md.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

# Keys an entry may have, with what reads them. A key outside this set and outside
# UPSTREAM_IGNORED is reported as unknown (a warning, or an error with --strict).
KNOWN_KEYS: frozenset[str] = frozenset(
    {
        # identity (filled by the loader)
        "name",
        "tag",
        "group",
        "install_group",
        "install_variant",
        "config_file",
        "config_base",
        "suite_file",
        # what to run and how
        "definition",
        "script",
        "working_dir",
        "argv",
        "plan",
        "num_machines",
        "env",
        "voir",
        "measure",
        "max_duration",
        "requires_capabilities",
        # environment and places
        "pip",
        "dirs",
        "use_current_env",
        # scoring and selection
        "enabled",
        "weight",
        "tags",
        "validation",
        "parity",
        "compare",  # regression thresholds of `milabench compare`
        # structure, consumed while loading
        "inherits",
        "matrix",
        "job",
    }
)

# Keys of the upstream format that load unchanged but have no effect here, with why.
# They are listed in docs/config.md and never flagged.
UPSTREAM_IGNORED: dict[str, str] = {
    "url": "gated model or dataset pages; every benchmark here uses synthetic data",
}


def unknown_keys(mapping: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """``(key, closest known key or None)`` for every key nothing reads.

    Keys starting with ``_`` are a benchfile's own settings (`BenchmarkPackage.config`):
    never reported.
    """
    out: list[tuple[str, str | None]] = []
    for key in mapping:
        if not isinstance(key, str) or key.startswith("_"):
            continue
        if key in KNOWN_KEYS or key in UPSTREAM_IGNORED:
            continue
        close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1, cutoff=0.6)
        out.append((key, close[0] if close else None))
    return out


def _mapping(value: Any) -> Mapping[str, Any]:
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else MappingProxyType({})


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    return ()


def _float_or(value: Any, default: float | None) -> float | None:
    """A number as a float; `default` for anything else (a bool, text, an int too large
    for a float: the validation reports those with their file and key)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    try:
        return float(value)
    except OverflowError:
        return default


def _int_or_none(value: Any) -> int | None:
    """A whole number as written (nothing converted: ``"3"`` is not 3), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


DIR_KEYS = ("base", "venv", "data", "runs", "extra", "cache", "code")


@dataclass(frozen=True)
class Dirs:
    """The entry's folders (docs/config.md "Brace placeholders" names them ``{milabench_<dir>}``)."""

    base: Path | None = None
    venv: Path | None = None
    data: Path | None = None
    runs: Path | None = None
    extra: Path | None = None
    cache: Path | None = None
    code: Path | None = None

    @classmethod
    def from_mapping(cls, value: Any) -> Dirs:
        value = value if isinstance(value, Mapping) else {}
        return cls(**{k: Path(str(value[k])) for k in DIR_KEYS if value.get(k) not in (None, "")})

    def get(self, key: str) -> Path | None:
        """The folder named `key` (one of `DIR_KEYS`), or None."""
        return getattr(self, key, None) if key in DIR_KEYS else None


@dataclass(frozen=True)
class PlanSettings:
    """``plan:`` of an entry: the method (underscores) and its counts."""

    method: str = "per_gpu"
    n: int | None = None  # njobs: number of copies
    nproc: int | None = None  # torchrun/accelerate: processes per node

    @classmethod
    def from_mapping(cls, value: Any) -> PlanSettings:
        value = value if isinstance(value, Mapping) else {}
        method = value.get("method") or "per_gpu"
        return cls(
            method=str(method).replace("-", "_"),
            n=_int_or_none(value.get("n")),
            nproc=_int_or_none(value.get("nproc")),
        )


@dataclass(frozen=True)
class Entry:
    """A resolved, validated benchmark entry (docs/config.md "Fields" lists them)."""

    name: str
    raw: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), repr=False)
    tag: tuple[str, ...] = ()
    group: str = ""
    install_group: str = ""
    install_variant: str | None = None
    definition: Path | None = None
    script: str | None = None
    working_dir: str | None = None
    argv: Any = None  # list or mapping, turned into a list by `config.argv.argv_list`
    plan: PlanSettings = field(default_factory=PlanSettings)
    num_machines: int = 1
    env: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    voir_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    measure: Mapping[str, Any] | None = None
    max_duration: float | None = None
    requires_capabilities: tuple[str, ...] = ()
    pip: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    dirs: Dirs = field(default_factory=Dirs)
    use_current_env: bool = False
    enabled: bool = True
    weight: float = 1.0
    tags: tuple[str, ...] = ()
    validation: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    compare: Any = None  # thresholds for `milabench compare` (compare.comparison reads them)
    # how the entry compares with upstream milabench's entry of the same name: None (not
    # said), "same", or "different: <reason>" (docs/parity.md); the report shows it
    parity: str | None = None
    config_file: str | None = None
    config_base: str | None = None
    suite_file: str | None = None  # the suite the command loaded (`--config`)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | Entry) -> Entry:
        """The entry of a resolved mapping (or of a run file's `config` record)."""
        if isinstance(mapping, Entry):
            return mapping
        m = dict(mapping)
        definition = m.get("definition")
        machines = _int_or_none(m.get("num_machines"))
        weight = m.get("weight", 1.0)
        max_duration = m.get("max_duration")
        voir = m.get("voir") if isinstance(m.get("voir"), Mapping) else {}
        group = str(m.get("group") or m.get("name") or "")
        name = str(m.get("name") or "")
        return cls(
            name=name,
            raw=MappingProxyType(m),
            tag=_strings(m.get("tag")) or (name,),
            group=group,
            install_group=str(m.get("install_group") or group),
            install_variant=(str(m["install_variant"]) if m.get("install_variant") else None),
            definition=Path(definition) if isinstance(definition, str) and definition else None,
            script=m.get("script") if isinstance(m.get("script"), str) else None,
            working_dir=m.get("working_dir") if isinstance(m.get("working_dir"), str) else None,
            argv=m.get("argv"),
            plan=PlanSettings.from_mapping(m.get("plan")),
            num_machines=max(machines or 1, 1),
            env=_mapping(m.get("env")),
            voir_options=_mapping(voir.get("options")),
            measure=_mapping(m["measure"]) if isinstance(m.get("measure"), Mapping) else None,
            max_duration=_float_or(max_duration, None),
            requires_capabilities=_strings(m.get("requires_capabilities")),
            pip=_mapping(m.get("pip")),
            dirs=Dirs.from_mapping(m.get("dirs")),
            use_current_env=bool(m.get("use_current_env")),
            enabled=bool(m.get("enabled", True)),
            weight=_float_or(weight, 0.0) or 0.0,
            tags=_strings(m.get("tags")),
            validation=_mapping(m.get("validation")),
            compare=m.get("compare"),
            parity=str(m["parity"]).strip() if m.get("parity") else None,
            config_file=str(m["config_file"]) if m.get("config_file") else None,
            config_base=str(m["config_base"]) if m.get("config_base") else None,
            suite_file=str(m["suite_file"]) if m.get("suite_file") else None,
        )

    # -- the benchmark's environment: the one place its paths are computed ------------
    @property
    def venv(self) -> Path:
        """The environment the benchmark runs in (this interpreter's with use_current_env)."""
        if self.use_current_env or self.dirs.venv is None:
            return Path(sys.prefix)
        return self.dirs.venv

    @property
    def bindir(self) -> Path:
        """Console scripts of the environment (``voir``, ``torchrun``)."""
        if self.use_current_env:
            return Path(sys.executable).parent
        return self.venv / "bin"

    @property
    def python(self) -> str:
        """Interpreter of the benchmark's environment."""
        if self.use_current_env:
            return sys.executable
        return str(self.bindir / "python")

    @property
    def code(self) -> Path:
        """The benchmark's folder (``definition``), the current folder when it has none."""
        return self.definition or Path(".")

    def as_dict(self) -> dict[str, Any]:
        """The resolved mapping as a plain (mutable, copied) dict: what gets recorded."""
        return dict(self.raw)


def as_entry(value: Mapping[str, Any] | Entry) -> Entry:
    """`value` as an `Entry` (callers that accept either a mapping or an entry)."""
    return Entry.from_mapping(value)
