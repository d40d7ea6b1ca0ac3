"""Environments: one virtual environment per install group, and what uses them.

Modules, one job each (nothing heavy is imported here):

* `groups`: the selected entries grouped by ``install_group``, with their requirement
  files, constraints, index options, key imports (pure data);
* `pipconf`: pip's package sources read like pip reads them, forwarded to uv;
* `constraints`: ``constraints/<variant>.txt`` and their ``# milabench:`` index directives;
* `marker`: the input hash and the install marker inside each environment;
* `backends`: the create/install/validate commands (uv or virtualenv + pip) as ProcessSpecs;
* `helperlib`: benchkit and benchshared copied into each environment;
* `steps`: running one command through the shared runner, and its explaining error line;
* `install`, `pin`, `prepare`, `dev`: the commands' logic.

See docs/environments.md.
"""

from __future__ import annotations

import json
from pathlib import Path

MARKER_NAME = "milabench-install.json"
FAILURE_SUFFIX = ".install-failed.json"


def is_installed(venv: str | Path) -> bool:
    """True when ``venv`` holds the marker of a validated install (cheap: one stat)."""
    return (Path(venv) / MARKER_NAME).is_file()


def failure_path(venv: Path) -> Path:
    """``<base>/venv/<group>.install-failed.json``: why the last install of ``venv`` failed
    (beside the environment, which may not exist: a folder there would not be one)."""
    return venv.with_name(venv.name + FAILURE_SUFFIX)


def read_failure(venv: Path) -> dict | None:
    """The record of the last failed install of ``venv`` (None when there is none)."""
    try:
        data = json.loads(failure_path(venv).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe_failure(record: dict) -> str:
    """``the last install on <host> failed (<step>: <why>)``, for run and preflight."""
    return (
        f"the last install on {record.get('host') or 'this host'} failed "
        f"({record.get('message') or 'no reason recorded'})"
    )
