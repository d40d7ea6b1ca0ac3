"""Constraint files per install variant, and the package indexes they name.

``constraints/<variant>.txt`` pins what every environment of that variant may get
(``torch==2.13.0`` for ``cpu``...). pip constraint files cannot carry index options, yet
the CUDA/ROCm/XPU builds of torch live on their own PyTorch indexes; so a constraints
file names its indexes in *directive comments*, which pip and uv both ignore and which
milabench turns into command-line options::

    # milabench: --extra-index-url https://download.pytorch.org/whl/cu128

Accepted directives: ``--index-url URL``, ``--extra-index-url URL``, ``--find-links
PATH|URL``. Anything else is an error naming the file and line.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from milabench.config.entry import Entry
from milabench.errors import ConfigError

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "constraints"
_DIRECTIVE = re.compile(r"^#\s*milabench:\s*(?P<body>.*)$")
_ALLOWED = {"--index-url", "--extra-index-url", "--find-links"}


def constraints_dir(system: dict | None = None) -> Path:
    """Folder of the constraint files: option ``install.constraints_dir`` or the repo's."""
    from milabench.config.options import get_option

    value = get_option(system or {}, "install.constraints_dir", None)
    return Path(value).expanduser().absolute() if value else DEFAULT_DIR


def constraints_file(variant: str, arch: str | None, folder: Path) -> Path | None:
    """``<folder>/<variant>.txt``; for ``unpinned`` the system arch's file; else None."""
    candidates = [folder / f"{variant}.txt"]
    if variant == "unpinned" and arch:
        candidates.append(folder / f"{arch}.txt")
    for path in candidates:
        if path.is_file():
            return path
    return None


def index_directives(path: Path | None) -> list[str]:
    """The index options a constraints file asks for, as argv items, in file order."""
    if path is None:
        return []
    args: list[str] = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        match = _DIRECTIVE.match(line.strip())
        if not match:
            continue
        words = shlex.split(match.group("body"))
        if len(words) != 2 or words[0] not in _ALLOWED:
            raise ConfigError(
                f"{path}:{lineno}: bad directive {line.strip()!r} "
                f"(use '# milabench: --extra-index-url URL', --index-url or --find-links)"
            )
        args += words
    return args


def entry_constraint_lines(entries: list[Entry]) -> list[str]:
    """Every entry's ``pip.constraints`` lines, de-duplicated, in entry order."""
    lines: list[str] = []
    for entry in entries:
        pip = entry.pip
        values = pip.get("constraints") or []
        if isinstance(values, str):
            values = [values]
        for value in values:
            value = str(value).strip()
            if value and value not in lines:
                lines.append(value)
    return lines


def entry_pip_args(entries: list[Entry]) -> list[str]:
    """Every entry's ``pip.args`` (a list, or one string split like a shell would)."""
    args: list[str] = []
    for entry in entries:
        pip = entry.pip
        values = pip.get("args") or []
        if isinstance(values, str):
            values = shlex.split(values)
        for value in values:
            args.append(str(value))
    return args


def write_entry_constraints(lines: list[str], path: Path) -> Path | None:
    """The entries' constraint lines as a file pip/uv can read (None when empty).

    Written next to the install logs and kept there: it documents what was installed.
    """
    if not lines:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
