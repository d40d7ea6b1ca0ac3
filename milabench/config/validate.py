"""Checks on resolved entries, so that mistakes surface at load time with a clear message.

Run on every non-private entry after inheritance and interpolation: the values checked
here are the ones the planner and runner rely on (plan method, weight, durations, argv).
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

from benchkit.options import parse_measure
from milabench.config.argv import argv_list
from milabench.config.capabilities import requirements
from milabench.config.document import display_path
from milabench.errors import ConfigError


def _number(value: Any) -> bool:
    """A finite int or float (a huge int that no float can hold is not a number here)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _check_measure(entry: dict[str, Any], fail) -> str | None:
    """The ``measure`` block parses as the benchmark will parse it (docs/measurement.md).

    Returns a note when an explicit ``max_duration`` is shorter than the time budget (the
    process could be killed before its window ends on a slow machine); the loader folds
    the notes of a suite into one warning.
    """
    try:
        settings = parse_measure(entry.get("measure"))
    except ValueError as exc:
        message = str(exc)
        key = (
            message.split(":", 1)[0].split(" ", 1)[0]
            if message.startswith("measure.")
            else "measure"
        )
        raise fail(key, message.removeprefix(f"{key}: ")) from None
    max_duration = entry.get("max_duration")
    if max_duration is not None and settings.timeout and max_duration < settings.timeout:
        return (
            f"max_duration {max_duration:g} s < measurement budget {settings.timeout:g} s "
            f"({settings.startup:g} s start-up + {settings.warmup_max:g} s warm-up + "
            f"{settings.max:g} s window)"
        )
    return None


def _check_script(entry: dict[str, Any], fail) -> None:
    """``script`` (a file of the definition folder, or absolute) and ``working_dir`` (a
    path, placeholders resolved at launch) are strings; the script exists when the folder
    does (a missing folder is reported where it is used)."""
    for key in ("script", "working_dir"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            what = "a file name" if key == "script" else "a folder path"
            raise fail(key, f"expected {what}, not {value!r}")
    script, definition = entry.get("script"), entry.get("definition")
    if script is None or not isinstance(definition, str) or not os.path.isdir(definition):
        return
    path = Path(os.path.expandvars(script)).expanduser()
    if not (path if path.is_absolute() else Path(definition) / path).is_file():
        raise fail("script", f"no file '{script}' in {display_path(Path(definition))}")


def warn_short_timeouts(notes: dict[str, str]) -> None:
    """One warning for every entry whose ``max_duration`` cuts its measurement budget."""
    if not notes:
        return
    by_note: dict[str, list[str]] = {}
    for name, note in notes.items():
        by_note.setdefault(note, []).append(name)
    for note, names in by_note.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        warnings.warn(
            f"{shown}: {note}; a slow machine may be stopped before its window ends "
            "(remove max_duration to derive the timeout from the budget)",
            stacklevel=3,
        )


def validate_entry(entry: dict[str, Any], file_of) -> str | None:
    """Raise `ConfigError` for the first invalid field; normalises `plan.method` in place.

    `file_of(key)` names the file that wrote `key` of this entry. Returns a note for the
    user (see `warn_short_timeouts`), or None.
    """
    name = entry["name"]

    def fail(key: str, what: str) -> ConfigError:
        return ConfigError.at(file_of(key.split(".")[0]), name, key, what)

    for key in ("enabled",):
        if not isinstance(entry.get(key), bool):
            raise fail(key, f"expected true or false, not {entry.get(key)!r}")
    if not _number(entry.get("weight")):
        raise fail("weight", f"expected a number, not {entry.get('weight')!r}")
    max_duration = entry.get("max_duration")
    if max_duration is not None and (not _number(max_duration) or max_duration <= 0):
        raise fail(
            "max_duration",
            f"expected a positive number of seconds, not {max_duration!r}",
        )
    machines = entry.get("num_machines")
    if isinstance(machines, bool) or not isinstance(machines, int) or machines < 1:
        raise fail("num_machines", f"expected a whole number >= 1, not {machines!r}")
    for key in ("group", "install_group", "install_variant"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise fail(key, f"expected a non-empty string, not {entry.get(key)!r}")
    if "definition" in entry and entry["definition"] is not None:
        if not isinstance(entry["definition"], str):
            raise fail("definition", "expected a folder path")
    _check_script(entry, fail)
    for key in ("env", "voir", "validation", "pip", "dirs", "measure"):
        if entry.get(key) is not None and not isinstance(entry[key], dict):
            raise fail(key, f"expected a mapping, not {type(entry[key]).__name__}")
    note = _check_measure(entry, fail)
    plan = entry.get("plan")
    if not isinstance(plan, dict):
        raise fail("plan", "expected a mapping such as {method: per_gpu}")
    method = plan.get("method", "per_gpu")
    if not isinstance(method, str) or not method:
        raise fail("plan.method", f"expected a method name such as per_gpu, not {method!r}")
    # The name itself is checked against the plan layer's method table, which owns the
    # list (`milabench.plan.check_methods`, run by the command line after loading).
    plan["method"] = method.replace("-", "_")
    for key in ("n", "nproc"):  # njobs copies, workers per node (torchrun, accelerate)
        count = plan.get(key)
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or count < 1
        ):
            raise fail(f"plan.{key}", f"expected a whole number >= 1, not {count!r}")
    argv = entry.get("argv")
    if argv is not None and not isinstance(argv, list | dict):
        raise fail("argv", "expected a list or a mapping")
    # Checked with the file that wrote argv, which may differ from the definition's.
    argv_list(entry.get("argv"), file=file_of("argv"), name=name)
    requirements(
        entry.get("requires_capabilities"), file=file_of("requires_capabilities"), name=name
    )
    return note
