"""The input hash of an install group, and the marker that records a successful install.

An install is skipped ("up to date") when the hash of everything that decides the
environment's content (requirement and constraint contents, pip args, the variant and
its ``--with`` requirements, the key imports, whether voir is added, the interpreter,
the content of ``benchkit`` and ``benchshared``) equals the one stored in the marker.
Neither the backend nor the files' paths are inputs. Nothing here starts a process, so
the check takes milliseconds. The marker lives inside the environment
(``<venv>/milabench-install.json``); it is written last, after validation, atomically,
and removed before an install starts, so a failed or interrupted install is never taken
for a good one. The full list of inputs and why: docs/environments.md "milabench install".
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from milabench.envs import MARKER_NAME
from milabench.envs.groups import InstallGroup
from milabench.envs.helperlib import source_hashes

FORMAT = 1  # bump when the install procedure changes what an environment contains


def _file_item(path: Path | None) -> dict | None:
    """A file as an input: its content, not where it lies."""
    if path is None:
        return None
    return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def install_inputs(group: InstallGroup) -> dict:
    """Everything that decides the environment's content, as JSON-able data."""
    inputs = {
        "format": FORMAT,
        "group": group.name,
        "variant": group.variant,
        "requirements": [_file_item(p) for p in group.requirements],
        "constraints": _file_item(group.constraints),
        "constraint_lines": list(group.constraint_lines),
        "index_args": list(group.index_args),
        "pip_args": list(group.pip_args),
        "key_imports": list(group.key_imports),
        "voir": group.needs_voir,
        "python": {"executable": sys.executable, "version": sys.version},
    }
    inputs.update(source_hashes())  # "benchkit", "benchshared": each package's content
    if group.with_requirements:  # the variant's --with directives (absent: no key, same hash)
        inputs["with"] = list(group.with_requirements)
    return inputs


def input_hash(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def marker_path(group: InstallGroup) -> Path:
    return group.venv / MARKER_NAME


def read_marker(group: InstallGroup) -> dict | None:
    try:
        return json.loads(marker_path(group).read_text())
    except (OSError, ValueError):
        return None


def is_up_to_date(group: InstallGroup, digest: str) -> bool:
    """The marker matches ``digest`` and the environment's interpreter still exists."""
    marker = read_marker(group)
    return bool(marker and marker.get("hash") == digest and group.python.exists())


def changed_inputs(group: InstallGroup, inputs: dict) -> list[str]:
    """Names of the inputs that differ from the last successful install (for messages)."""
    marker = read_marker(group)
    if not marker or not isinstance(marker.get("inputs"), dict):
        return []
    old = marker["inputs"]
    return sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))


def remove_marker(group: InstallGroup) -> None:
    marker_path(group).unlink(missing_ok=True)


def write_marker(
    group: InstallGroup, digest: str, inputs: dict, backend: str, seconds: float
) -> None:
    """Record a validated install (atomic rename: never a half-written marker)."""
    path = marker_path(group)
    content = {
        "hash": digest,
        "backend": backend,
        "time": time.time(),
        "seconds": round(seconds, 3),
        "benchmarks": group.benchmarks,
        "inputs": inputs,
    }
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
