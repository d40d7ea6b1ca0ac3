"""A Hugging Face Hub on loopback, speaking what ``huggingface_hub.hf_hub_download`` and
``HfApi.list_repo_files`` call (read from huggingface_hub 2.4's ``file_download.py``,
``hf_api.py`` and ``utils/_http.py``), plus plain file URLs for URL inputs.

Routes (a real ``ThreadingHTTPServer`` on 127.0.0.1, HTTP/1.0: one request a connection):

* ``HEAD|GET /{repo}/resolve/{revision}/{path}`` and ``/datasets/{repo}/resolve/...``:
  a small file answers 200 with ``ETag`` (its git blob sha1), ``Content-Length`` and
  ``X-Repo-Commit``; an LFS file (``.safetensors``, ``.parquet``, ``.model``, ``.bin``,
  ``.gz``, ``.zip``) answers 302 to ``http://localhost:{port}/lfs/{sha256}`` (another host
  name, as the hub's CDN is) with ``X-Linked-Etag`` (its sha256), ``X-Linked-Size``,
  ``X-Repo-Commit``. ``revision`` is ``main`` or the repository's commit, else 404
  ``X-Error-Code: RevisionNotFound``; a missing file is 404 ``EntryNotFound``; a missing
  repository 404 ``RepoNotFound``.
* Gated repositories: no ``Authorization: Bearer`` is 401 ``GatedRepo``; a token the
  server does not know is 401 "Invalid credentials in Authorization header"; a known
  token not granted the repository (licence not accepted) is 403 ``GatedRepo``.
* ``GET /api/{models|datasets}/{repo}/tree/{revision}[/{path}]``: the JSON listing
  (``type``, ``path``, ``size``, ``oid``, ``lfs``), gated like the files.
* ``GET /lfs/{sha256}`` and ``GET /url/{host}/{path}`` (plain files): ``Range: bytes=N-``
  answers 206 with ``Content-Range``.

Switches: `cut_once(key)` sends half of the body of the next full GET of that file, then
closes the connection (``key``: ``"repo_id/path"`` or the plain path); `corrupt(key)`
serves flipped bytes under the true headers. `requests` logs every request (method, path,
headers). Tiny files in the real formats: `safetensors_bytes`, `json_bytes`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".parquet", ".model", ".bin", ".gz", ".zip", ".pth")


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob (what the hub's ETag of a small file is)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode()


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A valid safetensors file: ``{name: (dtype, shape)}`` with deterministic data."""
    sizes = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    body = b""
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        data = bytes((i * 7 + len(name)) % 251 for i in range(count * sizes[dtype]))
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [len(body), len(body) + len(data)],
        }
        body += data
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + body


@dataclass
class Repo:
    """One repository of the fake hub."""

    repo_id: str
    repo_type: str
    files: dict[str, bytes]
    commit: str
    gated: bool = False
    granted: set[str] = field(default_factory=set)

    def is_lfs(self, path: str) -> bool:
        return path.endswith(LFS_SUFFIXES)


@dataclass
class Logged:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case


class HubServer:
    """The server: `add_repo`, `add_url`, then point ``HF_ENDPOINT`` at `endpoint`."""

    def __init__(self, tokens: set[str] | None = None) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.blobs: dict[str, bytes] = {}
        self.urls: dict[str, bytes] = {}
        self.tokens = set(tokens or ())
        self.requests: list[Logged] = []
        self._cut: dict[str, int | None] = {}
        self._corrupt: set[str] = set()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- set-up ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url_mirror(self) -> str:
        """What ``MILABENCH_URL_MIRROR`` is set to for the plain-URL mode."""
        return f"{self.endpoint}/url"

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        repo_type: str = "model",
        commit: str | None = None,
        gated: bool = False,
        granted: set[str] | None = None,
    ) -> Repo:
        repo = Repo(
            repo_id, repo_type, dict(files), commit or secrets.token_hex(20), gated,
            set(granted or ()),
        )  # fmt: skip
        self.repos[(repo_type, repo_id)] = repo
        for path, data in files.items():
            if repo.is_lfs(path):
                self.blobs[hashlib.sha256(data).hexdigest()] = data
        return repo

    def add_url(self, url: str, data: bytes) -> None:
        """Serve ``data`` for the real ``url`` under the mirror (``/url/{host}/{path}``)."""
        parts = urlsplit(url)
        self.urls[f"{parts.netloc}{parts.path}"] = data

    def cut_once(self, key: str, at: int | None = None) -> None:
        """The next full GET of `key` stops after `at` bytes (default: half the body)."""
        self._cut[key] = at

    def corrupt(self, key: str, on: bool = True) -> None:
        """Serve `key` with every byte flipped (`on`), or as it is again."""
        if on:
            self._corrupt.add(key)
        else:
            self._corrupt.discard(key)

    def gets(self, fragment: str = "") -> list[Logged]:
        """The GET requests whose path contains `fragment`."""
        return [r for r in self.requests if r.method == "GET" and fragment in r.path]

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    # -- switches (used by the handler) -------------------------------------------------------

    def take_cut(self, key: str, size: int) -> int | None:
        """Where to cut this GET of `key` (`size` bytes), or None; a cut happens once."""
        with self._lock:
            if key not in self._cut:
                return None
            at = self._cut.pop(key)
            return size // 2 if at is None else at

    def is_corrupt(self, key: str) -> bool:
        return key in self._corrupt


def _handler(server: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        # -- routing --------------------------------------------------------------------------

        def _route(self, head: bool) -> None:
            path = urlsplit(self.path).path
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.requests.append(Logged(self.command, path, headers))
            parts = [unquote(p) for p in path.strip("/").split("/")]
            if parts[:1] == ["lfs"] and len(parts) == 2:
                data = server.blobs.get(parts[1])
                if data is None:
                    return self._error(404, "EntryNotFound")
                return self._body(data, head, key=self._blob_key(parts[1]))
            if parts[:1] == ["url"]:
                data = server.urls.get("/".join(parts[1:]))
                if data is None:
                    return self._error(404, None)
                return self._body(data, head, key="/" + "/".join(parts[1:]))
            if parts[:1] == ["api"] and len(parts) >= 6 and parts[1] in ("models", "datasets"):
                return self._tree(parts[1][:-1], "/".join(parts[2:4]), parts[5], parts[6:], head)
            repo_type = "model"
            if parts[:1] == ["datasets"]:
                repo_type, parts = "dataset", parts[1:]
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(repo_type, "/".join(parts[:2]), parts[3], parts[4:], head)
            return self._error(404, None)

        def _blob_key(self, sha: str) -> str:
            for repo in server.repos.values():
                for rel, data in repo.files.items():
                    if repo.is_lfs(rel) and hashlib.sha256(data).hexdigest() == sha:
                        return f"{repo.repo_id}/{rel}"
            return sha

        def _repo(self, repo_type: str, repo_id: str, revision: str) -> Repo | None:
            repo = server.repos.get((repo_type, repo_id))
            if repo is None:
                self._error(404, "RepoNotFound")
                return None
            if repo.gated:
                auth = self.headers.get("Authorization", "")
                token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else None
                if token is None:
                    self._error(401, "GatedRepo", f"Access to {repo_id} is restricted.", repo)
                    return None
                if token not in server.tokens:
                    message = "Invalid credentials in Authorization header"
                    self._error(401, None, message, repo)
                    return None
                if token not in repo.granted:
                    message = f"Access to {repo_id} is restricted: not in the authorized list."
                    self._error(403, "GatedRepo", message, repo)
                    return None
            if revision not in ("main", repo.commit):
                self._error(404, "RevisionNotFound", None, repo)
                return None
            return repo

        def _resolve(
            self, repo_type: str, repo_id: str, revision: str, rest: list[str], head: bool
        ) -> None:
            repo = self._repo(repo_type, repo_id, revision)
            if repo is None:
                return
            rel = "/".join(rest)
            data = repo.files.get(rel)
            if data is None:
                return self._error(404, "EntryNotFound", None, repo)
            if repo.is_lfs(rel):
                sha = hashlib.sha256(data).hexdigest()
                self.send_response(302)
                self.send_header("Location", f"http://localhost:{server.port}/lfs/{sha}")
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("X-Linked-Etag", f'"{sha}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("ETag", f'"{git_blob_sha1(data)}"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            extra = {"ETag": f'"{git_blob_sha1(data)}"', "X-Repo-Commit": repo.commit}
            self._body(data, head, key=f"{repo.repo_id}/{rel}", extra=extra)

        def _tree(
            self, repo_type: str, repo_id: str, revision: str, rest: list[str], head: bool
        ) -> None:
            repo = self._repo(repo_type, repo_id, revision)
            if repo is None:
                return
            prefix = "/".join(rest)
            items: list[dict[str, Any]] = []
            folders: set[str] = set()
            for rel, data in sorted(repo.files.items()):
                if prefix and not rel.startswith(prefix + "/"):
                    continue
                for i in range(1, rel.count("/") + 1):
                    folders.add("/".join(rel.split("/")[:i]))
                item: dict[str, Any] = {
                    "type": "file",
                    "oid": git_blob_sha1(data),
                    "size": len(data),
                    "path": rel,
                }
                if repo.is_lfs(rel):
                    sha = hashlib.sha256(data).hexdigest()
                    item["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 134}
                items.append(item)
            items += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in folders]
            self._body(json_bytes(items), head, key="", extra={"Content-Type": "application/json"})

        # -- answers --------------------------------------------------------------------------

        def _error(
            self,
            status: int,
            code: str | None,
            message: str | None = None,
            repo: Repo | None = None,
        ) -> None:
            body = json_bytes({"error": message or code or "not found"})
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            if message:
                self.send_header("X-Error-Message", message)
            if repo is not None:
                self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _body(
            self, data: bytes, head: bool, key: str, extra: dict[str, str] | None = None
        ) -> None:
            start = 0
            ranged = self.headers.get("Range", "")
            if ranged.startswith("bytes=") and not head:
                first = ranged[len("bytes=") :].split("-", 1)[0]
                start = int(first) if first.isdigit() else 0
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            if server.is_corrupt(key):
                data = bytes(b ^ 0xFF for b in data)
            payload = data[start:]
            self.send_response(206 if start else 200)
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if head:
                return
            cut = server.take_cut(key, len(payload)) if not start and key else None
            if cut is not None:
                self.wfile.write(payload[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(payload)

    return Handler
