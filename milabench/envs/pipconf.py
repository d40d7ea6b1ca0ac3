"""The user's pip network settings, read the way pip reads them, to hand over to uv.

uv ignores pip's configuration, yet must see the packages, indexes and certificates pip
would (a CPU torch wheel only in a ``find-links`` folder, the certificate authority of a
TLS-inspecting proxy in ``cert``). The same files and variables are read in pip's order
(later overrides earlier; a variable beats every file; ``[install]`` beats
``[global]``), and the result is turned into the options and variables uv reads for the
same thing; a ``UV_*`` variable the user set wins over its translation. The files are
parsed here rather than through ``pip config list`` so that an up-to-date check starts
no process. Everything is read where the install runs (on a node: the node's files and
login environment). Which setting becomes what: docs/environments.md "Back-ends".
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

_SOURCE_KEYS = ("index-url", "extra-index-url", "find-links", "no-index")
_NETWORK_KEYS = ("cert", "client-cert", "trusted-host", "proxy", "timeout", "retries")
_KEYS = _SOURCE_KEYS + _NETWORK_KEYS
# pip's option aliases, as its configuration files and PIP_* variables may spell them
_ALIASES = {"default-timeout": "timeout"}
# What pip's requests session trusts before its own ``cert`` (requests reads them per
# request and lets them win over the session's ``verify``: seen with pip 23.2 and 26.3).
CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


@dataclass
class PipSettings:
    """Package sources in force for pip; ``sources`` lists where they came from."""

    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    no_index: bool = False
    sources: list[str] = field(default_factory=list)
    cert: str | None = None  # the CA bundle pip verifies servers with
    client_cert: str | None = None  # PEM holding the client's certificate and key
    trusted_hosts: list[str] = field(default_factory=list)
    proxy: str | None = None
    timeout: str | None = None
    retries: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

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
        for host in self.trusted_hosts:
            args += ["--allow-insecure-host", host]
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

    @property
    def ca_bundle(self) -> str | None:
        """The CA bundle pip verifies servers with, where one is named (see module)."""
        for name in CA_BUNDLE_VARIABLES:
            if self.environ.get(name):
                return self.environ[name]
        return self.cert

    def uv_env(self, uv_version: tuple[int, ...] | None = None) -> dict[str, str]:
        """The variables of a uv process that make it fetch as pip would (module table).

        Index URLs with credentials are passed here rather than on the command line:
        command lines are written to the install logs (``start`` events); environments
        are not, so a token in a URL never reaches a file (nor does a proxy's password).
        ``uv_version``: the installed uv's (`installed_uv_version` by default), which
        decides the name of the system-certificates switch.
        """
        env: dict[str, str] = {}
        if self.has_credentials:
            if self.index_url:
                env["UV_INDEX_URL"] = self.index_url
            if self.extra_index_urls:
                env["UV_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        bundle = self.ca_bundle
        if bundle:
            env["SSL_CERT_FILE"] = bundle
        if self.client_cert:
            env["SSL_CLIENT_CERT"] = self.client_cert
        if self.proxy:
            url = self.proxy if "://" in self.proxy else f"http://{self.proxy}"
            for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
                env[name] = url
        own = {k for k in self.environ if k.startswith("UV_")}
        if self.timeout and "UV_HTTP_TIMEOUT" not in own:
            env["UV_HTTP_TIMEOUT"] = str(max(1, round(float(self.timeout))))
        if self.retries and "UV_HTTP_RETRIES" not in own:
            env["UV_HTTP_RETRIES"] = str(int(float(self.retries)))
        if not own & {"UV_SYSTEM_CERTS", "UV_NATIVE_TLS"}:
            version = installed_uv_version() if uv_version is None else uv_version
            env["UV_SYSTEM_CERTS" if version >= (0, 11) else "UV_NATIVE_TLS"] = "1"
        return env


def installed_uv_version() -> tuple[int, ...]:
    """The version of the ``uv`` package this interpreter runs (``()`` if unknown).

    uv 0.11 renamed ``UV_NATIVE_TLS`` to ``UV_SYSTEM_CERTS`` (the old name warns since);
    the package metadata tells which one to use without starting uv.
    """
    from importlib import metadata

    try:
        text = metadata.version("uv")
    except metadata.PackageNotFoundError:
        return ()
    parts = []
    for word in text.split(".")[:3]:
        digits = "".join(c for c in word if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


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
            key = _ALIASES.get(key, key)
            if key in _KEYS:
                found[key] = value
    return found


def _variable(env: Mapping[str, str], key: str) -> tuple[str, str] | None:
    """``(name, value)`` of ``PIP_<KEY>`` (or of an alias's variable, such as
    ``PIP_DEFAULT_TIMEOUT``) when set."""
    names = [key] + [alias for alias, target in _ALIASES.items() if target == key]
    for name in names:
        var = "PIP_" + name.upper().replace("-", "_")
        if env.get(var) not in (None, ""):
            return var, env[var]
    return None


def read_pip_settings(environ: Mapping[str, str] | None = None) -> PipSettings:
    """Merge pip's files and ``PIP_*`` variables into one `PipSettings`."""
    env = os.environ if environ is None else environ
    merged: dict[str, str] = {}
    settings = PipSettings(environ=dict(env))
    for path in config_files(env):
        values = _read_file(path) if path.is_file() else {}
        if values:
            merged.update(values)
            settings.sources.append(str(path))
    for key in _KEYS:
        found = _variable(env, key)
        if found is not None:
            merged[key] = found[1]
            settings.sources.append(found[0])
    if merged.get("index-url"):
        settings.index_url = merged["index-url"].strip()
    settings.extra_index_urls = _split(merged.get("extra-index-url", ""))
    settings.find_links = _split(merged.get("find-links", ""))
    settings.no_index = _truthy(merged.get("no-index", ""))
    settings.trusted_hosts = _split(merged.get("trusted-host", ""))
    for key in ("cert", "client-cert", "proxy", "timeout", "retries"):
        value = merged.get(key, "").strip()
        setattr(settings, key.replace("-", "_"), value or None)
    for name in ("timeout", "retries"):
        try:
            float(getattr(settings, name) or 0)
        except ValueError:
            setattr(settings, name, None)  # pip itself refuses it; uv keeps its default
    return settings
