"""Real package sources on loopback for the network tests: tiny real wheels
(`build_wheel`), a certificate authority made for the test, a PEP 503 "simple" index over
HTTPS (optionally behind Basic authentication, without HEAD support, or asking for a
client certificate), and an HTTP CONNECT proxy. Used by tests/envs and tests/fleet.

Everything listens on 127.0.0.1 in threads of the test process and stops when its
context ends; certificates and keys are files under the test's temporary folder. Nothing
is installed or changed on the machine.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import http.server
import ipaddress
import select
import socket
import ssl
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def build_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """``<folder>/<name>-<version>-py3-none-any.whl`` holding module ``name``."""
    module = name.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f'__version__ = "{version}"\n'.encode(),
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires)
        ).encode(),
        f"{dist}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: milabench-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in files.items())
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for inner, data in files.items():
            zf.writestr(inner, data)
    return path


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class Authority:
    """A throwaway certificate authority; ``cert`` is its PEM file."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    cert: Path

    @classmethod
    def create(cls, folder: Path, name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        usage = x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True,
            content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, encipher_only=False, decipher_only=False,
        )  # fmt: skip
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(usage, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name.replace(' ', '-')}.pem"
        path.write_bytes(_pem_cert(certificate))
        return cls(key, certificate, path)

    def issue(self, folder: Path, name: str, *, server: bool = True) -> Path:
        """A PEM file holding a certificate signed here (for 127.0.0.1 and localhost when
        ``server``, else a client's) followed by its key: what ``ssl.load_cert_chain``, pip's
        ``client-cert`` and uv's ``SSL_CLIENT_CERT`` read."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        purpose = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        path = folder / f"{name}.pem"
        path.write_bytes(_pem_cert(certificate) + _pem_key(key))
        return path


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class PackageIndex:
    """A PEP 503 index of the wheels in ``wheels`` on 127.0.0.1 (``url``: its ``/simple``).

    ``tls``: the server's PEM (certificate and key) to speak HTTPS; ``auth``: ``(user,
    password)`` every request must carry (Basic), else 401; ``head=False`` answers HEAD
    with 501, as some mirrors and proxies do; ``client_ca``: the authority a client
    certificate must come from (mutual TLS). ``requests`` counts what was asked.
    """

    def __init__(
        self,
        wheels: Path,
        *,
        tls: Path | None = None,
        auth: tuple[str, str] | None = None,
        head: bool = True,
        client_ca: Path | None = None,
    ) -> None:
        self.wheels = wheels
        self.requests: list[str] = []
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                if not head:
                    index.requests.append(f"HEAD {self.path}")
                    self.send_error(501, "Unsupported method ('HEAD')")
                    return
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, body: bool) -> None:
                index.requests.append(f"{self.command} {self.path}")
                if auth is not None:
                    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
                    if self.headers.get("Authorization") != f"Basic {token}":
                        self.send_response(401)
                        self.send_header("WWW-Authenticate", 'Basic realm="test index"')
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                found = index.resolve(self.path.split("?", 1)[0])
                if found is None:
                    self.send_error(404)
                    return
                data, kind = found
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self.server = _Server(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls)
            if client_ca is not None:
                context.verify_mode = ssl.CERT_REQUIRED
                context.load_verify_locations(client_ca)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.port = self.server.server_address[1]
        self.url = f"{scheme}://127.0.0.1:{self.port}/simple"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def resolve(self, path: str) -> tuple[bytes, str] | None:
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["simple"] and len(parts) == 2:
            name = parts[1].lower().replace("_", "-")
            links = []
            for wheel in sorted(self.wheels.glob("*.whl")):
                if wheel.name.split("-")[0].lower().replace("_", "-") == name:
                    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
                    links.append(f'<a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a>')
            if not links:
                return None
            page = "<!DOCTYPE html><html><body>\n" + "<br/>\n".join(links) + "\n</body></html>"
            return page.encode(), "text/html"
        if parts[:1] == ["files"] and len(parts) == 2:
            wheel = self.wheels / parts[1]
            if wheel.is_file():
                return wheel.read_bytes(), "application/octet-stream"
        return None

    def __enter__(self) -> PackageIndex:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class ConnectProxy:
    """An HTTP proxy on 127.0.0.1 that only tunnels (``CONNECT host:port``), to loopback
    only; ``tunnels`` lists the targets it connected."""

    def __init__(self) -> None:
        self.tunnels: list[str] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_CONNECT(self) -> None:
                host, _, port = self.path.rpartition(":")
                if host not in ("127.0.0.1", "localhost"):
                    self.send_error(403, "loopback only")
                    return
                try:
                    upstream = socket.create_connection((host, int(port)), timeout=10)
                except OSError:
                    self.send_error(502)
                    return
                proxy.tunnels.append(self.path)
                self.send_response(200, "Connection established")
                self.end_headers()
                self.relay(upstream)

            def relay(self, upstream: socket.socket) -> None:
                client = self.connection
                with upstream:
                    while True:
                        ready, _, _ = select.select([client, upstream], [], [], 30)
                        if not ready:
                            return
                        for sock in ready:
                            data = sock.recv(65536)
                            if not data:
                                return
                            (upstream if sock is client else client).sendall(data)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ConnectProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def closed_port() -> int:
    """A port of 127.0.0.1 nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What a machine (or a developer's shell) may set that decides how packages are fetched:
# removed from the tests' environments so that only the test's pip configuration counts.
NETWORK_VARIABLES = (
    "SSL_CERT_FILE", "SSL_CERT_DIR", "SSL_CLIENT_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    "http_proxy", "https_proxy", "all_proxy", "no_proxy",
)  # fmt: skip
