"""`requires_capabilities`: boolean expressions over the system that gate an entry.

An entry such as ``requires_capabilities: ["len(nodes) >= 2"]`` is skipped (with the
failing expression as the recorded reason) on a system that cannot run it. Expressions
are evaluated by `milabench.config.safe_eval`: comparisons, ``and``/``or``/``not``,
arithmetic, ``len()``, subscripts, numbers and strings over the names ``nodes``, ``gpu``,
``cpu``, ``arch`` and ``system``; nothing else.

A suite states what the whole suite needs of the machine in its `_requires` block, in
the same expressions (`SuiteRequirement`): the GPU suite needs an accelerator. Unlike an
entry's requirement, which skips that entry at run time, an unmet suite requirement is
said once, with the suite to use instead, before anything is installed, prepared or
started (`unmet_suite_requirements`, `requirement_line`; the commands refuse it unless
told to ignore it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from milabench.config.entry import Entry, as_entry
from milabench.config.merge import strip_markers
from milabench.config.safe_eval import UnsafeExpression, evaluate
from milabench.config.yamlio import DELETE
from milabench.errors import ConfigError

FUNCTIONS = {"len": len, "min": min, "max": max, "int": int, "float": float}


def requirements(value: Any, *, file: object = None, name: str | None = None) -> list[str]:
    """``requires_capabilities`` as a list (a single string counts as one); `file` and
    `name` locate the error when it is neither."""
    reqs = value or []
    if isinstance(reqs, str):
        reqs = [reqs]
    if not isinstance(reqs, list | tuple) or not all(isinstance(r, str) for r in reqs):
        raise ConfigError.at(file, name, "requires_capabilities", "expected a list of expressions")
    return list(reqs)


def capability_names(system: dict[str, Any]) -> dict[str, Any]:
    """The names an expression can use."""
    return {
        "nodes": list(system.get("nodes") or []),
        "gpu": dict(system.get("gpu") or {}),
        "cpu": dict(system.get("cpu") or {}),
        "arch": system.get("arch", "cpu"),
        "system": system,
    }


def unmet_requirement(entry: Entry | Mapping[str, Any], system: dict[str, Any]) -> str | None:
    """The first expression that is false on `system`, or None when all hold."""
    entry = as_entry(entry)
    names = capability_names(system)
    for text in entry.requires_capabilities:
        try:
            ok = evaluate(text, names, FUNCTIONS)
        except UnsafeExpression as err:
            raise ConfigError.at(
                entry.config_file,
                entry.name,
                "requires_capabilities",
                f"{text!r}: {err}",
            ) from None
        if not ok:
            return text
    return None


# -- what a whole suite needs of the machine (`_requires`) ---------------------------------

REQUIRES = "_requires"
REQUIREMENT_KEYS = ("check", "missing", "instead")


@dataclass(frozen=True)
class SuiteRequirement:
    """One requirement of a suite's `_requires` block.

    ``check``: an expression of the `requires_capabilities` language; ``missing``: what a
    machine on which it is false lacks, in words (``a GPU``); ``instead``: the suite made
    for such a machine (absolute; written relative to the file that names it), or None.
    """

    name: str
    check: str
    missing: str
    instead: Path | None = None
    file: str | None = None


def suite_requirements(
    value: Any, file_of: Callable[[str | None], object]
) -> tuple[SuiteRequirement, ...]:
    """The `_requires` block of a suite document (a mapping of named requirements, each
    ``{check, missing, instead}``); ``file_of(name)`` is the file that wrote a
    requirement, which errors name and `instead` is relative to."""
    if value is None or value is DELETE:
        return ()
    value = strip_markers(value)
    if not isinstance(value, Mapping):
        raise ConfigError.at(file_of(None), REQUIRES, None, "expected a mapping of requirements")
    out = []
    for name, req in value.items():
        file = file_of(str(name))
        if req is None or not isinstance(req, Mapping):
            what = "expected a mapping with check, missing and instead"
            raise ConfigError.at(file, REQUIRES, str(name), what)
        unknown = sorted(set(map(str, req)) - set(REQUIREMENT_KEYS))
        if unknown:
            what = f"unknown key {unknown[0]!r} (known: {', '.join(REQUIREMENT_KEYS)})"
            raise ConfigError.at(file, REQUIRES, str(name), what)
        check, missing, instead = req.get("check"), req.get("missing"), req.get("instead")
        for key, text in (("check", check), ("missing", missing)):
            if not isinstance(text, str) or not text.strip():
                raise ConfigError.at(file, REQUIRES, f"{name}.{key}", "expected a string")
        if instead is not None and not isinstance(instead, str):
            raise ConfigError.at(file, REQUIRES, f"{name}.instead", "expected a suite file")
        path = None
        if instead:
            path = Path(instead).expanduser()
            if not path.is_absolute():
                path = Path(str(file or ".")).absolute().parent / path
            path = Path(os.path.normpath(path))
        out.append(SuiteRequirement(str(name), check, missing.strip(), path, str(file or "")))
    return tuple(out)


def unmet_suite_requirements(
    requirements: tuple[SuiteRequirement, ...], system: dict[str, Any]
) -> list[SuiteRequirement]:
    """The requirements of the suite that are false on `system`."""
    names = capability_names(system)
    unmet = []
    for req in requirements:
        try:
            ok = evaluate(req.check, names, FUNCTIONS)
        except UnsafeExpression as err:
            raise ConfigError.at(
                req.file, REQUIRES, f"{req.name}.check", f"{req.check!r}: {err}"
            ) from None
        if not ok:
            unmet.append(req)
    return unmet


def machine_words(system: dict[str, Any]) -> str:
    """What the machine has, as an unmet requirement's line says it: ``arch cpu, no
    accelerator``, ``arch cuda, 1 accelerator, 2 nodes``."""
    count = int((system.get("gpu") or {}).get("count") or 0)
    gpus = "no accelerator" if count == 0 else f"{count} accelerator{'s' * (count > 1)}"
    nodes = len(system.get("nodes") or [])
    where = f", {nodes} nodes" if nodes > 1 else ""
    return f"arch {system.get('arch', 'cpu')}, {gpus}{where}"


def requirement_line(suite_name: str, unmet: list[SuiteRequirement], system: dict) -> str:
    """``config/standard.yaml needs a GPU (arch cuda, rocm or xpu), which this machine
    lacks (arch cpu, no accelerator)``: the start of every message about an unmet suite
    requirement (the command line adds what to run instead)."""
    needs = " and ".join(dict.fromkeys(req.missing for req in unmet))
    return f"{suite_name} needs {needs}, which this machine lacks ({machine_words(system)})"
