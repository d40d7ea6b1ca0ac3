"""Matrix entries (docs/config.md "Matrix entries"): one entry becomes the Cartesian product of values.

Runs before inheritance, on raw entries, so a generated job can still `inherits` a
template. Substitution only touches ``{key}`` where `key` is a matrix key: every other
brace (launch-time placeholders such as ``{n_worker}``, JSON text) is left for later.
A string that is exactly one matrix placeholder takes the value itself, keeping its type
(``stop: '{stop}'`` stays a number).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from milabench.config.document import check_entry_name
from milabench.config.merge import deep_merge
from milabench.errors import ConfigError

_BRACE = re.compile(r"\{([^{}]+)\}")


def substitute(value: Any, values: dict[str, Any]) -> Any:
    """`value` with ``{key}`` replaced for every matrix key, recursively (keys too)."""
    if isinstance(value, str):
        whole = _BRACE.fullmatch(value)
        if whole and whole.group(1) in values:
            return values[whole.group(1)]

        def repl(m: re.Match) -> str:
            key = m.group(1)
            return str(values[key]) if key in values else m.group(0)

        return _BRACE.sub(repl, value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            new_key = substitute(k, values)
            out[new_key if isinstance(new_key, str) else str(new_key)] = substitute(v, values)
        return out
    if isinstance(value, list):
        return [substitute(v, values) for v in value]
    return value


def combinations(matrix: dict[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the matrix values, first key varying slowest."""
    keys = list(matrix)
    axes = [v if isinstance(v, list) else [v] for v in matrix.values()]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes)]


def expand_entry(name: str, entry: dict[str, Any], file: object) -> dict[str, dict[str, Any]]:
    """The generated entries of one matrix entry, in product order."""
    matrix = entry["matrix"]
    if not isinstance(matrix, dict):
        raise ConfigError.at(file, name, "matrix", "expected a mapping of keys to lists")
    if not matrix:
        raise ConfigError.at(file, name, "matrix", "empty matrix")
    job = entry.get("job", {})
    if not isinstance(job, dict):
        raise ConfigError.at(file, name, "job", "expected a mapping (the job template)")
    # Fields next to `matrix` apply to every job; `job` itself overrides them.
    outer = {k: v for k, v in entry.items() if k not in ("matrix", "job")}
    template = deep_merge(outer, job)
    pattern = template.pop("name", None)
    if pattern is None:
        pattern = name + "".join("-{" + k + "}" for k in matrix)
    if not isinstance(pattern, str):
        raise ConfigError.at(file, name, "job.name", "expected a string")
    out: dict[str, dict[str, Any]] = {}
    for values in combinations(matrix):
        job_name = substitute(pattern, values)
        job_name = check_entry_name(str(job_name), file, f"{name}.job.name")
        if job_name in out:
            raise ConfigError.at(
                file,
                name,
                "job.name",
                f"two generated entries are named '{job_name}' (put every matrix key in the name)",
            )
        generated = substitute(template, values)
        generated["matrix"] = dict(values)
        out[job_name] = generated
    return out


def expand_matrices(doc) -> None:
    """Replace every matrix entry of a `Document` by its jobs, in place, keeping order."""
    if not any(isinstance(e, dict) and "matrix" in e for e in doc.entries.values()):
        return
    new_entries: dict[str, Any] = {}
    generated_by: dict[str, str] = {}
    for name, entry in doc.entries.items():
        if not (isinstance(entry, dict) and "matrix" in entry):
            if name in new_entries:
                _duplicate(doc, generated_by[name], name)
            new_entries[name] = entry
            continue
        file = doc.file_of(name, "matrix")
        for job_name, job in expand_entry(name, entry, file).items():
            if job_name in new_entries or (job_name in doc.entries and job_name != name):
                _duplicate(doc, name, job_name)
            new_entries[job_name] = job
            generated_by[job_name] = name
            doc.origin[job_name] = file
            for key in job:
                doc.key_origin[(job_name, key)] = file
    doc.entries = new_entries


def _duplicate(doc, matrix_name: str, clash: str) -> None:
    raise ConfigError.at(
        doc.file_of(matrix_name, "matrix"),
        matrix_name,
        "job.name",
        f"generated entry '{clash}' has the same name as another entry",
    )
