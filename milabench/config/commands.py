"""The milabench command lines that messages tell a person to run, written whole.

A hint such as "run `milabench install --select resnet50` first" only works when pasted
if it names the suite, the base and the system file the failing command used: without
``--config`` it installs the default suite's entries (or answers "no benchmark named
'resnet50'"), without ``--base`` it installs somewhere the run never looks. Every such
hint is built here, from the options of the command that failed (`command_line`) or
from a loaded entry, which records its suite and base (`entry_command`).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path

from milabench.config.document import display_path
from milabench.config.entry import Entry

DEFAULT_BASE = "results"


def shown_path(path: str | Path) -> str:
    """A path as a command line shows it: relative when under the working directory."""
    return display_path(Path(path))


def command_line(
    verb: str | Iterable[str],
    *,
    config: str | Path | None = None,
    base: str | Path | None = None,
    system: str | Path | None = None,
    select: Iterable[str] = (),
    exclude: Iterable[str] = (),
    overrides: Iterable[str] = (),
    use_current_env: bool = False,
    extra: Iterable[str] = (),
) -> str:
    """``milabench <verb> [--select a,b] [--exclude c] --config C [--base B] [--system S]
    [--override k=v]... [--use-current-env]``, quoted for a POSIX shell: what, then
    where. ``--base`` is left out when it is the default (``./results``)."""
    words = ["milabench", *([verb] if isinstance(verb, str) else verb)]
    select, exclude = list(select), list(exclude)
    if select:
        words += ["--select", ",".join(select)]
    if exclude:
        words += ["--exclude", ",".join(exclude)]
    if config is not None:
        words += ["--config", shown_path(config)]
    if base is not None and Path(base).absolute() != Path(DEFAULT_BASE).absolute():
        words += ["--base", shown_path(base)]
    if system is not None:
        words += ["--system", shown_path(system)]
    for item in overrides:
        words += ["--override", item]
    if use_current_env:
        words.append("--use-current-env")
    words += list(extra)
    return shlex.join(words)


def entry_command(verb: str, entry: Entry, *extra: str) -> str:
    """The command `verb` for this one entry, in the suite and base it was loaded from:
    ``milabench install --select resnet50 --config config/standard-smoke.yaml``."""
    return command_line(
        verb,
        config=entry.suite_file or entry.config_file,
        base=entry.dirs.base,
        select=[entry.name],
        extra=extra,
    )
