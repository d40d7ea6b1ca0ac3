"""Constraint files per install variant, and the package indexes they name.

``constraints/<variant>.txt`` pins what every environment of that variant may get. pip
constraint files cannot carry index options, so a constraints file names its indexes in
*directive comments*, which pip and uv both ignore and which milabench turns into
command-line options, one per line::

    # milabench: --extra-index-url https://download.pytorch.org/whl/rocm6.4

Accepted: ``--index-url``, ``--extra-index-url``, ``--find-links`` (passed as they are),
``--torch-backend cu128`` (uv's option; pip gets PyTorch's index of that build as an
extra index) and ``--with REQUIREMENT`` (pinned into and installed with every group).
Anything else is an error naming the file and line. What each directive does for uv and
for pip: docs/environments.md "Constraint files and package indexes".
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from milabench.config.entry import Entry
from milabench.errors import ConfigError

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "constraints"
TORCH_INDEX = "https://download.pytorch.org/whl/{backend}"
_DIRECTIVE = re.compile(r"^#\s*milabench:\s*(?P<body>.*)$")
_INDEX_OPTIONS = {"--index-url", "--extra-index-url", "--find-links"}
_ALLOWED = _INDEX_OPTIONS | {"--torch-backend", "--with"}
_BACKEND = re.compile(r"^(cpu|xpu|cu\d{2,3}|rocm\d+(\.\d+)*)$")
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?([=<>!~].*)?$")


@dataclass(frozen=True)
class Directives:
    """What a constraints file's ``# milabench:`` lines ask for (see module doc)."""

    index_args: list[str] = field(default_factory=list)  # uv and pip, as written
    torch_backend: str | None = None
    with_requirements: list[str] = field(default_factory=list)

    @property
    def pip_index_args(self) -> list[str]:
        """The index options in pip's spelling (the torch back-end as its index URL)."""
        if self.torch_backend is None:
            return list(self.index_args)
        url = TORCH_INDEX.format(backend=self.torch_backend)
        return [*self.index_args, "--extra-index-url", url]

    @property
    def uv_index_args(self) -> list[str]:
        """The index options for ``uv pip install/compile``."""
        return uv_spelling(self.pip_index_args, self.torch_backend)


def uv_spelling(pip_args: list[str], torch_backend: str | None) -> list[str]:
    """Index options of pip's spelling for uv: PyTorch's index of ``torch_backend``, where
    ``pip_args`` names it, becomes ``--torch-backend <backend>`` (so that a caller that
    leaves the indexes out, such as an offline install, leaves the back-end out too)."""
    if torch_backend is None:
        return list(pip_args)
    pair = ["--extra-index-url", TORCH_INDEX.format(backend=torch_backend)]
    out: list[str] = []
    found, at = False, 0
    while at < len(pip_args):
        if not found and pip_args[at : at + 2] == pair:
            found, at = True, at + 2
            continue
        out.append(pip_args[at])
        at += 1
    return [*out, "--torch-backend", torch_backend] if found else out


def read_directives(path: Path | None) -> Directives:
    """The directives of a constraints file, in file order; `ConfigError` naming the file
    and line for anything else."""
    if path is None:
        return Directives()
    index: list[str] = []
    backend: str | None = None
    extra: list[str] = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        match = _DIRECTIVE.match(line.strip())
        if not match:
            continue
        words = shlex.split(match.group("body"))
        if len(words) != 2 or words[0] not in _ALLOWED:
            raise ConfigError(
                f"{path}:{lineno}: bad directive {line.strip()!r} (use '# milabench: "
                "--extra-index-url URL', --index-url, --find-links, --torch-backend or --with)"
            )
        option, value = words
        if option == "--torch-backend":
            if not _BACKEND.match(value) or backend is not None:
                raise ConfigError(
                    f"{path}:{lineno}: bad directive {line.strip()!r} (one --torch-backend, "
                    "a PyTorch build such as cu128, cu130, cpu, rocm6.4 or xpu)"
                )
            backend = value
        elif option == "--with":
            if not _REQUIREMENT.match(value):
                raise ConfigError(
                    f"{path}:{lineno}: bad directive {line.strip()!r} (--with takes one "
                    "requirement, such as nvidia-ml-py or name==1.0)"
                )
            extra.append(value)
        else:
            index += words
    return Directives(index, backend, extra)


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
    """The index options a constraints file asks for, as pip's argv items, in file order."""
    return read_directives(path).pip_index_args


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
