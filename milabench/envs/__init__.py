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

from pathlib import Path

MARKER_NAME = "milabench-install.json"


def is_installed(venv: str | Path) -> bool:
    """True when ``venv`` holds the marker of a validated install (cheap: one stat)."""
    return (Path(venv) / MARKER_NAME).is_file()
