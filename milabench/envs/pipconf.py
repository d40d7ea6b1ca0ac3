"""The user's pip package sources, read the way pip reads them, to hand over to uv.

uv ignores pip's configuration. Without forwarding, the uv fast path would see other
packages than the pip fallback (on a machine whose CPU torch wheel is only reachable
through a pip ``find-links`` folder, it would not find it at all). We read the same
files and variables pip does, in pip's order (later overrides earlier; a variable beats
every file; an ``[install]`` section beats ``[global]``), and turn the result into uv's
``--index-url`` / ``--extra-index-url`` / ``--find-links`` / ``--no-index`` options.

Parsing the files ourselves (instead of running ``pip config list``) keeps an up-to-date
check free of subprocesses.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

_KEYS = ("index-url", "extra-index-url", "find-links", "no-index")


@dataclass
class PipSettings:
    """Package sources in force for pip; ``sources`` lists where they came from."""

    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    no_index: bool = False
    sources: list[str] = field(default_factory=list)

    @property
    def has_credentials(self) -> bool:
        """An index URL carries a user or password (``https://user:token@host/simple``)."""
        urls = [self.index_url or "", *self.extra_index_urls]
        return any(urlsplit(u).username or urlsplit(u).password for u in urls if u)

    def uv_args(self) -> list[str]:
        """Options for ``uv pip install/compile`` that select the same packages as pip.

        Index URLs holding credentials are left out here: see `uv_env`.
        """
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        if not self.has_credentials:
            if self.index_url:
                args += ["--index-url", self.index_url]
            for url in self.extra_index_urls:
                args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        return args

    def source_count(self, extra_args: list[str] | tuple[str, ...] = ()) -> int:
        """How many package sources an install sees (indexes and find-links folders).

        ``extra_args`` are the constraint file's directives (``--extra-index-url URL`` ...).
        The default index (PyPI, or the ``index-url`` replacing it) counts unless ``no-index``.
        """
        words = list(extra_args)
        count = 0 if self.no_index else 1  # the default or replacing ``index-url``
        count += len(self.extra_index_urls) + len(self.find_links)
        count += sum(1 for w in words if w in ("--extra-index-url", "--find-links"))
        return count

    def index_strategy_args(
        self, strategy: str | None, extra_args: list[str] | tuple[str, ...] = ()
    ) -> list[str]:
        """``--index-strategy S`` for uv, only where it matters.

        uv stops at the first index that has a package (``first-index``), pip takes the
        best version across all of them. With several sources (an extra index or a
        find-links folder beside the default index) milabench asks for pip's behaviour,
        ``unsafe-best-match``; with one source the option changes nothing and is left out.
        An explicit ``install.index_strategy`` (``strategy``) is always passed.
        """
        if strategy:
            return ["--index-strategy", str(strategy)]
        if self.source_count(extra_args) > 1:
            return ["--index-strategy", "unsafe-best-match"]
        return []

    def uv_env(self) -> dict[str, str]:
        """Index URLs with credentials, as uv's variables rather than command-line items.

        Command lines are written to the install logs (``start`` events); environments are
        not, so a token in a URL never reaches a file.
        """
        if not self.has_credentials:
            return {}
        env: dict[str, str] = {}
        if self.index_url:
            env["UV_INDEX_URL"] = self.index_url
        if self.extra_index_urls:
            env["UV_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        return env


def config_files(environ: Mapping[str, str] | None = None) -> list[Path]:
    """pip's configuration files, lowest priority first (pip's own order).

    global (``$XDG_CONFIG_DIRS/pip/pip.conf``, ``/etc/pip.conf``), user (legacy
    ``~/.pip/pip.conf``, then ``$XDG_CONFIG_HOME/pip/pip.conf``), site
    (``sys.prefix/pip.conf``), then ``$PIP_CONFIG_FILE``. ``PIP_CONFIG_FILE=os.devnull``
    disables every file, as it does for pip.
    """
    env = os.environ if environ is None else environ
    explicit = env.get("PIP_CONFIG_FILE")
    if explicit == os.devnull:
        return []
    files: list[Path] = []
    xdg_dirs = env.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files += [Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs.split(os.pathsep)) if d]
    files.append(Path("/etc/pip.conf"))
    home = Path(env.get("HOME") or Path.home())
    files.append(home / ".pip" / "pip.conf")
    files.append(Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / "pip.conf")
    if explicit:
        files.append(Path(explicit))
    return files


def _split(value: str) -> list[str]:
    return [v for v in value.split() if v]


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "yes", "true", "on")


def _read_file(path: Path) -> dict[str, str]:
    """Relevant keys of one file: ``[global]`` then ``[install]`` on top."""
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, configparser.Error):
        return {}
    found: dict[str, str] = {}
    for section in ("global", "install"):
        if not parser.has_section(section):
            continue
        for key, value in parser.items(section):
            key = key.replace("_", "-")
            if key in _KEYS:
                found[key] = value
    return found


def read_pip_settings(environ: Mapping[str, str] | None = None) -> PipSettings:
    """Merge pip's files and ``PIP_*`` variables into one `PipSettings`."""
    env = os.environ if environ is None else environ
    merged: dict[str, str] = {}
    settings = PipSettings()
    for path in config_files(env):
        values = _read_file(path) if path.is_file() else {}
        if values:
            merged.update(values)
            settings.sources.append(str(path))
    for key in _KEYS:
        var = "PIP_" + key.upper().replace("-", "_")
        if env.get(var) not in (None, ""):
            merged[key] = env[var]
            settings.sources.append(var)
    if merged.get("index-url"):
        settings.index_url = merged["index-url"].strip()
    settings.extra_index_urls = _split(merged.get("extra-index-url", ""))
    settings.find_links = _split(merged.get("find-links", ""))
    settings.no_index = _truthy(merged.get("no-index", ""))
    return settings
