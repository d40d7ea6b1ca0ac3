"""Why an installer could not fetch a package: one short cause read from its output.

uv and pip say why a download failed in their own words, spread over several lines (uv:
``error: Failed to fetch: URL`` then ``cause: ...`` lines; pip: ``Could not fetch URL``
or ``Retrying ... after connection broken by`` warnings, then ``ERROR: No matching
distribution``). `classify` reads those lines and returns a `NetworkCause` naming the
kind of trouble (TLS, an HTTP status, the proxy, DNS or the connection) in the same
words for both installers, with the URL (credentials redacted) or the host. None when
the output shows no network cause (a requirement nobody publishes, a conflict): trying
another installer would not help. Pure functions of the lines, so every caller
(`milabench install`, and through its error line `fleet` and `preflight`) names a
failure the same way. The list of causes: docs/environments.md "Back-ends".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from milabench.events import redact_url

TLS, HTTP, PROXY, CONNECT = "tls", "http", "proxy", "connect"


@dataclass(frozen=True)
class NetworkCause:
    """One network cause: its kind (``tls``, ``http``, ``proxy``, ``connect``), the words
    that name it and where (a URL or ``host:port``; may be empty)."""

    kind: str
    label: str
    where: str = ""

    def __str__(self) -> str:
        return f"{self.label} at {self.where}" if self.where else self.label


_PREFIXES = re.compile(r"^(?:error:|cause:|hint:|warning:|WARNING:|ERROR:|[×╰├│─▶ ])+")

# uv (rustls): "invalid peer certificate: UnknownIssuer"
_UV_CERT = re.compile(r"invalid peer certificate: ([A-Za-z]+)")
_UV_CERT_WORDS = {
    "UnknownIssuer": "unknown issuer",
    "Expired": "certificate expired",
    "ExpiredContext": "certificate expired",
    "NotValidForName": "certificate not valid for this host name",
    "NotValidForNameContext": "certificate not valid for this host name",
    "NotValidYet": "certificate not valid yet",
    "Revoked": "certificate revoked",
    "BadSignature": "bad certificate signature",
}
_UV_ALERT = re.compile(r"received fatal alert: ([A-Za-z]+)")
_ALERT_WORDS = {
    "CertificateRequired": "the server requires a client certificate",
    "BadCertificate": "the server rejected the client certificate",
    "UnknownCA": "the server does not trust the client certificate",
}
# pip (OpenSSL): "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: <why> (_ssl"
_PIP_CERT = re.compile(r"certificate verify failed: ([^(\]\"']+)")
_PIP_CERT_WORDS = (
    ("local issuer", "unknown issuer"),
    ("self-signed", "unknown issuer"),
    ("self signed", "unknown issuer"),
    ("expired", "certificate expired"),
    ("mismatch", "certificate not valid for this host name"),
    ("not yet valid", "certificate not valid yet"),
)

_UV_STATUS = re.compile(
    r"HTTP status (?:client|server) error \((\d{3})\s*(.*?)\) for url \((\S+?)\)"
)
_UV_HINT = re.compile(
    r"An index URL \((\S+?)\) could not be queried due to [^(]*\((\d{3})\s*([^)]*)\)"
)
_PIP_401 = re.compile(r"401 Error, Credentials not correct for (\S+)")
_PIP_HTTP_ERROR = re.compile(r"HTTP error (\d{3}) while getting (\S+)")
_PIP_STATUS = re.compile(r"(\d{3}) (?:Client|Server) Error: (.+?) for url: (\S+)")
_TUNNEL_STATUS = re.compile(r"[Tt]unnel connection failed: (\d{3}[^'\")]*)")

_URL = re.compile(
    r"(?:Failed to fetch:|for url \(|Could not fetch URL|while getting)\s*(\S+?)[):]?(?:\s|$)"
)
_PIP_HOST = re.compile(r"host='([^']+)', port=(\d+)")
_DNS_HOST = re.compile(r"(?:HTTPSConnection|HTTPConnection)\(host='([^']+)'")

_CONNECT_WORDS = (
    ("connection refused", "connection refused"),
    ("no route to host", "no route to host"),
    ("network is unreachable", "network unreachable"),
    ("connection reset", "connection reset"),
)
_DNS_WORDS = (
    "dns error",
    "failed to lookup address",
    "name or service not known",
    "temporary failure in name resolution",
    "nodename nor servname",
    "nameresolutionerror",
)
_TIMEOUT_WORDS = ("operation timed out", "connecttimeouterror", "read timed out", "timed out")


_UV_LINE = ("error:", "cause:", "hint:", "×", "╰", "├", "│")


def _clean(lines: Iterable[str]) -> list[str]:
    """The lines without uv's and pip's prefixes, uv's wrapped lines joined again (uv
    wraps a long ``cause:`` line, indenting the rest under its text)."""
    out: list[str] = []
    joinable = False
    for line in lines:
        stripped = line.strip()
        text = _PREFIXES.sub("", stripped).strip()
        if not text:
            joinable = False
            continue
        if joinable and line[:4].isspace() and not stripped.startswith(_UV_LINE):
            out[-1] += " " + text
            continue
        out.append(text)
        joinable = stripped.startswith(_UV_LINE)
    return out


def _where_url(url: str) -> str:
    return redact_url(url.rstrip(").,;'\""))


def _first_url(lines: list[str]) -> str:
    for line in lines:
        m = _URL.search(line)
        if m and "://" in m.group(1):
            return _where_url(m.group(1))
    for line in lines:
        m = _PIP_HOST.search(line)
        if m:
            return f"{m.group(1)}:{m.group(2)}"
    return ""


def _host_of(where: str) -> str:
    if "://" in where:
        return urlsplit(where).hostname or where
    return where.rsplit(":", 1)[0]


def _tls(lines: list[str], where: str) -> NetworkCause | None:
    for line in lines:
        m = _UV_CERT.search(line)
        if m:
            word = m.group(1)
            if word == "Other":
                inner = next((w for w in _UV_CERT_WORDS if w in line), None)
                word = inner or word
            return NetworkCause(
                TLS, "TLS: " + _UV_CERT_WORDS.get(word, f"invalid certificate ({word})"), where
            )
        m = _UV_ALERT.search(line)
        if m:
            word = _ALERT_WORDS.get(m.group(1), f"the server refused the handshake ({m.group(1)})")
            return NetworkCause(TLS, "TLS: " + word, where)
        m = _PIP_CERT.search(line)
        if m:
            why = m.group(1).strip().lower()
            label = next((lab for key, lab in _PIP_CERT_WORDS if key in why), why)
            return NetworkCause(TLS, "TLS: " + label, where)
        if "tlsv13 alert certificate required" in line.lower() or "CERTIFICATE_REQUIRED" in line:
            return NetworkCause(TLS, "TLS: the server requires a client certificate", where)
    return None


def _proxy(lines: list[str], where: str) -> NetworkCause | None:
    text = "\n".join(lines)
    lowered = text.lower()
    if "tunnel error" not in lowered and "proxyerror" not in lowered and "proxy" not in lowered:
        return None
    m = _TUNNEL_STATUS.search(text)
    if m:
        return NetworkCause(PROXY, f"proxy refused the tunnel ({m.group(1).strip()})", where)
    if "tunnel error" in lowered or "proxyerror" in lowered or "connect to proxy" in lowered:
        if "unsuccessful" in lowered:
            return NetworkCause(PROXY, "proxy refused the tunnel (CONNECT)", where)
        for key, label in _CONNECT_WORDS:
            if key in lowered:
                words = "refused the connection" if key == "connection refused" else f": {label}"
                return NetworkCause(PROXY, f"proxy {words}".replace(" :", ":"), where)
        if any(w in lowered for w in _DNS_WORDS):
            return NetworkCause(PROXY, "proxy: DNS: cannot resolve the proxy", where)
        return NetworkCause(PROXY, "proxy: cannot connect", where)
    return None


def _http(lines: list[str], where: str) -> NetworkCause | None:
    for line in lines:
        for pattern, order in ((_UV_STATUS, (1, 2, 3)), (_PIP_STATUS, (1, 2, 3))):
            m = pattern.search(line)
            if m:
                code, words, url = (m.group(i) for i in order)
                return NetworkCause(HTTP, f"HTTP {code} {words}".strip(), _where_url(url))
        m = _UV_HINT.search(line)
        if m:
            return NetworkCause(
                HTTP, f"HTTP {m.group(2)} {m.group(3)}".strip(), _where_url(m.group(1))
            )
        m = _PIP_401.search(line)
        if m:
            return NetworkCause(HTTP, "HTTP 401 Unauthorized", _where_url(m.group(1)))
        m = _PIP_HTTP_ERROR.search(line)
        if m:
            code = m.group(1)
            words = {"401": "Unauthorized", "403": "Forbidden", "404": "Not Found"}.get(code, "")
            return NetworkCause(HTTP, f"HTTP {code} {words}".strip(), _where_url(m.group(2)))
    return None


def _connect(lines: list[str], where: str) -> NetworkCause | None:
    lowered = "\n".join(lines).lower()
    if any(w in lowered for w in _DNS_WORDS):
        m = next((_DNS_HOST.search(ln) for ln in lines if _DNS_HOST.search(ln)), None)
        host = m.group(1) if m else _host_of(where)
        return NetworkCause(CONNECT, f"DNS: cannot resolve {host}" if host else "DNS error", where)
    for key, label in _CONNECT_WORDS:
        if key in lowered:
            return NetworkCause(CONNECT, label, where)
    if any(w in lowered for w in _TIMEOUT_WORDS):
        return NetworkCause(CONNECT, "timed out", where)
    return None


def classify(lines: Iterable[str]) -> NetworkCause | None:
    """The network cause an installer's output shows (module docstring), or None."""
    cleaned = _clean(lines)
    if not cleaned:
        return None
    where = _first_url(cleaned)
    for rule in (_tls, _proxy, _http, _connect):
        found = rule(cleaned, where)
        if found is not None:
            return found
    return None
