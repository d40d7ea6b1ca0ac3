"""Can a machine reach its package sources? One request to each, as its pip would make it.

`milabench fleet` and `milabench preflight` run this on every node before anything is
copied (`probe_argv`: an inline program carrying `milabench.envs.pipconf`, so the node
reads *its own* pip configuration and login environment, as its ``milabench install``
will). Each source of the node's settings (the index, PyPI when none is named, each extra
index, each find-links folder or page) gets one GET with pip's settings (``http(s)``) or
must exist (a folder); a failure is named in the words of `milabench.envs.netcause`.
The probe prints one ``@milabench-sources {json}`` line; `summary_line` makes the one
line per node the commands print. What each request sends and which answers pass:
docs/doctor.md "Package sources". Standard library only, on the node.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit, urlunsplit

PREFIX = "@milabench-sources "
DEFAULT_INDEX = "https://pypi.org/simple"
PROBE_PROJECT = "pip"
MAX_TIMEOUT = 15.0

_MAIN = r"""
import json, sys
from milabench.envs.pipconf import read_pip_settings
from milabench.doctor.sources import PREFIX, check_sources
print(PREFIX + json.dumps(check_sources(read_pip_settings())), flush=True)
"""
SHIPPED = ("milabench.envs.pipconf", "milabench.doctor.sources")


def probe_argv(python: str) -> list[str]:
    """The command that prints the node's ``@milabench-sources {json}`` line."""
    from milabench.machine.inline import inline_program  # not needed on the node

    return [python, "-c", inline_program(_MAIN, SHIPPED, filename="<milabench-sources>")]


def parse(stdout: str) -> dict | None:
    for line in stdout.splitlines():
        if line.startswith(PREFIX):
            try:
                found = json.loads(line[len(PREFIX) :])
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"<redacted>@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _tls_words(err: BaseException) -> str:
    text = f"{getattr(err, 'verify_message', '') or ''} {err}".lower()
    if "local issuer" in text or "self-signed" in text or "self signed" in text:
        return "TLS: unknown issuer"
    if "expired" in text:
        return "TLS: certificate expired"
    if "mismatch" in text:
        return "TLS: certificate not valid for this host name"
    if "certificate required" in text or "certificate_required" in text:
        return "TLS: the server requires a client certificate"
    if "unknown ca" in text or "bad certificate" in text:
        return "TLS: the server rejected the client certificate"
    reason = getattr(err, "reason", None) or str(err)
    return f"TLS: {reason}"


def _connect_words(err: BaseException, proxied: bool) -> str:
    """A connection failure (or a proxy's) in netcause's words."""
    text = str(err)
    if "Tunnel connection failed" in text:
        return f"proxy refused the tunnel ({text.split(':', 1)[-1].strip()})"
    if isinstance(err, socket.gaierror):
        return "proxy: DNS: cannot resolve the proxy" if proxied else "DNS: cannot resolve"
    if isinstance(err, TimeoutError | socket.timeout):
        return "timed out"
    code = getattr(err, "errno", None)
    words = {
        errno.ECONNREFUSED: "connection refused",
        errno.EHOSTUNREACH: "no route to host",
        errno.ENETUNREACH: "network unreachable",
        errno.ECONNRESET: "connection reset",
    }.get(code)
    if words is None:
        words = text or type(err).__name__
    if proxied:
        return "proxy refused the connection" if code == errno.ECONNREFUSED else f"proxy: {words}"
    return words


def _context(settings, host: str, port: int | None) -> ssl.SSLContext:
    bundle = getattr(settings, "ca_bundle", None)
    context = ssl.create_default_context(cafile=bundle) if bundle else ssl.create_default_context()
    trusted = set(getattr(settings, "trusted_hosts", []) or [])
    if host in trusted or (port is not None and f"{host}:{port}" in trusted):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    client = getattr(settings, "client_cert", None)
    if client:
        context.load_cert_chain(client)
    return context


def check_url(settings, url: str, timeout: float, *, index: bool = True) -> dict:
    """One GET of ``url``'s page of `PROBE_PROJECT` (``index``), or of ``url`` itself (a
    find-links page): ``{"source", "ok", "status"}`` or ``{"source", "ok", "cause"}``."""
    parts = urlsplit(url)
    where = _redacted(url)
    host, port = parts.hostname or "", parts.port
    netloc = host + (f":{port}" if port else "")
    target = urlunsplit(parts._replace(netloc=netloc))
    if index:
        target = target.rstrip("/") + f"/{PROBE_PROJECT}/"
    headers = {"User-Agent": "milabench-sources"}
    if parts.username or parts.password:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    proxy = getattr(settings, "proxy", None)
    if proxy:
        proxy = proxy if "://" in proxy else f"http://{proxy}"
        proxies = {"http": proxy, "https": proxy}
    else:
        proxies = urllib.request.getproxies()
        if urllib.request.proxy_bypass(host):
            proxies = {}
    proxied = bool(proxies.get(parts.scheme))
    try:
        handlers = [urllib.request.ProxyHandler(proxies)]
        if parts.scheme == "https":
            handlers.append(urllib.request.HTTPSHandler(context=_context(settings, host, port)))
        opener = urllib.request.build_opener(*handlers)
        with opener.open(urllib.request.Request(target, headers=headers), timeout=timeout) as r:
            r.read(1024)
            return {"source": where, "ok": True, "status": r.status}
    except urllib.error.HTTPError as err:
        if err.code in (401, 403) or err.code >= 500:
            return {"source": where, "ok": False, "cause": f"HTTP {err.code} {err.reason}"}
        if err.code == 407:
            return {"source": where, "ok": False, "cause": "proxy: HTTP 407 (credentials)"}
        return {"source": where, "ok": True, "status": err.code}
    except urllib.error.URLError as err:
        reason = err.reason
        if isinstance(reason, ssl.SSLError):
            cause = _tls_words(reason)
        elif isinstance(reason, BaseException):
            cause = _connect_words(reason, proxied)
        else:
            cause = _connect_words(OSError(str(reason)), proxied)
        if cause == "DNS: cannot resolve":
            cause += f" {host}"
        return {"source": where, "ok": False, "cause": cause}
    except ssl.SSLError as err:
        return {"source": where, "ok": False, "cause": _tls_words(err)}
    except (OSError, ValueError) as err:  # an unreadable client certificate, a bad URL
        if isinstance(err, OSError) and getattr(err, "errno", None) is not None:
            return {"source": where, "ok": False, "cause": _connect_words(err, proxied)}
        return {"source": where, "ok": False, "cause": f"{type(err).__name__}: {err}"}


def _check_folder(path: str) -> dict:
    folder = unquote(urlsplit(path).path) if path.startswith("file:") else path
    if os.path.isdir(folder) and os.access(folder, os.R_OK | os.X_OK):
        return {"source": path, "ok": True}
    return {"source": path, "ok": False, "cause": "no such folder on this node"}


def sources_of(settings) -> list[str]:
    """Every package source an install on this machine would use (pip's order)."""
    found: list[str] = []
    if not settings.no_index:
        found.append(settings.index_url or DEFAULT_INDEX)
        found += list(settings.extra_index_urls)
    found += list(settings.find_links)
    return found


def check_sources(settings, timeout: float | None = None) -> dict:
    """``{"sources": [...], "read_from": [...]}``: each source of ``settings`` checked."""
    if timeout is None:
        try:
            timeout = min(float(getattr(settings, "timeout", None) or MAX_TIMEOUT), MAX_TIMEOUT)
        except ValueError:
            timeout = MAX_TIMEOUT
    results = []
    links = set(settings.find_links)
    for source in sources_of(settings):
        if source.startswith(("http://", "https://")):
            results.append(check_url(settings, source, timeout, index=source not in links))
        else:
            results.append(_check_folder(source))
    return {"sources": results, "read_from": list(getattr(settings, "sources", []))}


def failures(found: dict | None) -> list[dict]:
    return [s for s in (found or {}).get("sources", []) if not s.get("ok")]


def summary_line(found: dict | None) -> str:
    """``ok: URL, FOLDER`` or ``<cause> at <source>`` (and how many more failed)."""
    if not found:
        return "not checked"
    bad = failures(found)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return f"{bad[0]['cause']} at {bad[0]['source']}{more}"
    listed: Sequence[dict] = found.get("sources", [])
    return "ok: " + (", ".join(s["source"] for s in listed) or "no source (no-index)")
