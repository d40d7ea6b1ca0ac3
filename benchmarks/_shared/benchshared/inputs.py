"""Real inputs (data sets, tokenizers, weights) as upstream milabench uses them.

Contract, in three calls:

* `fetch(names, entry=...)` (a ``prepare.py``): every named input of `catalogue.CATALOGUE`
  is present and verified in ``$MILABENCH_DIR_DATA/inputs/<name>/`` afterwards, or the
  call printed one line naming the input, the entry, the cause and the fix, and maps it to
  None. It never raises for a network, token or licence reason.
* `locate(name)` (a ``main.py``): the folder of a complete, verified input, else None; no
  network, no hashing (the manifest is written last, after verification).
* `announce(entry, used, stand_in=...)` (a ``main.py``, rank 0): one ``inputs`` record on
  the data channel saying whether the run used upstream's inputs; the report marks an
  entry that ran a stand-in "not comparable" (docs/inputs.md).

Imports only the standard library; the hub client is imported where a fetch needs it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TextIO

MANIFEST = "milabench-input.json"
PREFIX = "milabench: input"
OFFLINE_FIX = (
    "prepare it where the hosts are reachable and carry it with 'milabench bundle', "
    "or unset HF_HUB_OFFLINE"
)
CHUNK = 1 << 20
RETRIES = 5
TIMEOUT = 30.0


def inputs_root() -> Path:
    """``$MILABENCH_DIR_DATA/inputs`` (``data/inputs`` for a script run by hand)."""
    return Path(os.environ.get("MILABENCH_DIR_DATA", "data")) / "inputs"


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of an input folder: ``{"name", "source", "revision", "files": {path:
    {"sha256", "size"}}}``, or None when absent or unreadable."""
    try:
        value = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def locate(name: str, root: Path | None = None) -> Path | None:
    """The folder of input `name` when its manifest is there and every file it lists has
    the listed size; None otherwise (never fetched, cut short, or files removed)."""
    folder = (inputs_root() if root is None else root) / name
    manifest = read_manifest(folder)
    if manifest is None or not isinstance(manifest.get("files"), dict):
        return None
    for rel, info in manifest["files"].items():
        path = folder / rel
        size = info.get("size") if isinstance(info, dict) else None
        if not path.is_file() or (isinstance(size, int) and path.stat().st_size != size):
            return None
    return folder


def inputs_record(
    entry: str, used: Mapping[str, Path | None], stand_in: str | None = None
) -> dict[str, Any]:
    """The data-channel record: which inputs were upstream's (with their revision), which
    were missing, and, when any was, what ran instead (`stand_in`, one phrase)."""
    real: dict[str, str | None] = {}
    missing: list[str] = []
    for name, folder in used.items():
        if folder is None:
            missing.append(name)
        else:
            manifest = read_manifest(folder) or {}
            real[name] = manifest.get("revision")
    payload: dict[str, Any] = {
        "entry": entry,
        "comparable": not missing,
        "real": real,
        "missing": missing,
    }
    if missing:
        payload["stand_in"] = stand_in or "synthetic stand-in"
    return {"task": "inputs", "inputs": payload, "time": time.time()}


def announce(
    entry: str, used: Mapping[str, Path | None], stand_in: str | None = None, writer: Any = None
) -> dict[str, Any] | None:
    """Write the `inputs_record` (rank 0 only; flushed at once) and print one line when a
    stand-in runs. Returns the record, or None on other ranks."""
    if os.environ.get("RANK", "0") not in ("", "0"):
        return None
    record = inputs_record(entry, used, stand_in)
    if writer is None:
        from benchkit.channel import default_writer

        writer = default_writer()
    writer.write(record)
    writer.flush()
    payload = record["inputs"]
    if payload["missing"]:
        print(
            f"{entry}: upstream's inputs missing ({', '.join(payload['missing'])}): running "
            f"{payload['stand_in']}; not comparable with upstream milabench",
            flush=True,
        )
    return record


# -- fetching ----------------------------------------------------------------------------


class Unavailable(Exception):
    """An input cannot be had now: `cause` (what happened) and `fix` (what to do)."""

    def __init__(self, cause: str, fix: str | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix


def fetch(
    names: Iterable[str], entry: str, root: Path | None = None, *, err: TextIO | None = None
) -> dict[str, Path | None]:
    """Make every input of `names` present and verified under `root` (default
    `inputs_root`); ``{name: folder, or None}``.

    An input that `locate` finds is not fetched again. A hub input is fetched file by file
    with ``huggingface_hub.hf_hub_download`` at the catalogue's revision (``HF_ENDPOINT``,
    ``HF_TOKEN`` or upstream's ``MILABENCH_HF_TOKEN``, ``HF_HUB_OFFLINE`` honoured), a URL
    input with urllib (HTTP Range resume of a ``.part`` file). Every file is checked (sha256
    of the catalogue, else the hub's LFS sha256, else md5; and the size); the manifest, with
    the resolved commit, is written last. Whatever makes an input unavailable (offline,
    unreachable, gated without token, licence not accepted, 404, checksum mismatch) prints
    exactly one line on `err` (stderr): ``milabench: input NAME for ENTRY unavailable:
    CAUSE; FIX``, maps it to None and deletes nothing verified. A name not in the
    catalogue is a bug: KeyError.
    """
    from benchshared import catalogue

    base = inputs_root() if root is None else Path(root)
    stream = sys.stderr if err is None else err
    found: dict[str, Path | None] = {}
    for name in names:
        spec = catalogue.get(name)
        folder = locate(name, base)
        if folder is not None:
            found[name] = folder
            continue
        folder = base / name
        try:
            try:
                (folder / MANIFEST).unlink(missing_ok=True)  # an older, now incomplete, input
                if _offline():
                    raise Unavailable("offline (HF_HUB_OFFLINE=1) and not prepared", OFFLINE_FIX)
                if spec.kind == "hub":
                    revision, files = _fetch_hub(spec, folder)
                else:
                    revision, files = _fetch_url(spec, folder)
                _write_manifest(folder, name, spec.source, revision, files)
                found[name] = folder
            except OSError as exc:
                if exc.errno not in _DISK_ERRNOS:
                    raise
                raise _unwritable(exc, folder) from None
        except Unavailable as err_:
            found[name] = None
            fix = err_.fix or spec.fix()
            print(f"{PREFIX} {name} for {entry} unavailable: {err_.cause}; {fix}", file=stream)
            stream.flush()
    return found


_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS, errno.EPERM})


def _unwritable(exc: OSError, folder: Path) -> Unavailable:
    return Unavailable(
        f"cannot write {folder} ({exc.strerror or exc})",
        "free space there or make $MILABENCH_DIR_DATA writable, then milabench prepare",
    )


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_token() -> str | None:
    """``HF_TOKEN``, else upstream's ``MILABENCH_HF_TOKEN``, else None (then the hub
    client's own saved token, if any, is used)."""
    return os.environ.get("HF_TOKEN") or os.environ.get("MILABENCH_HF_TOKEN") or None


def sha256_file(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file, read in 1 MiB blocks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_sha256(value: str | None) -> bool:
    return bool(value) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def matches(pattern: str, path: str) -> bool:
    """`fnmatch` per path segment: ``*`` never crosses ``/`` (``*.json`` is top-level)."""
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(
        fnmatchcase(n, p) for p, n in zip(parts, names, strict=True)
    )


def _is_pattern(path: str) -> bool:
    return any(c in path for c in "*?[")


def _write_manifest(
    folder: Path, name: str, source: str, revision: str, files: dict[str, dict[str, Any]]
) -> None:
    manifest = {"name": name, "source": source, "revision": revision, "files": files}
    tmp = folder / f"{MANIFEST}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)


def _mismatch(path: Path, rel: str, what: str, got: str, expected: str) -> Unavailable:
    path.unlink(missing_ok=True)
    return Unavailable(
        f"{rel}: {what} {got[:16]} is not the expected {expected[:16]} (file deleted)",
        "run milabench prepare again; if it repeats, the source serves other bytes than "
        "the catalogue pins (report it)",
    )


# -- the hub -----------------------------------------------------------------------------


def _fetch_hub(spec: Any, folder: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """Download `spec`'s files into `folder`; (resolved commit, manifest files)."""
    try:
        import huggingface_hub as hub
    except ImportError:
        raise Unavailable(
            "huggingface_hub is not installed in this environment",
            "add huggingface_hub to the benchmark's requirements and reinstall",
        ) from None
    endpoint = os.environ.get("HF_ENDPOINT") or None
    token = hub_token()
    from huggingface_hub import constants as hub_constants

    unreachable = _unreachable(endpoint or hub_constants.ENDPOINT)
    if unreachable is not None:
        raise Unavailable(unreachable, UNREACHABLE_FIX)
    try:
        return _download_hub(hub, spec, folder, endpoint, token)
    except Unavailable:
        raise
    except Exception as exc:  # classified below; anything not from the client re-raises
        cause = _hub_cause(exc, spec, token)
        if cause is None:
            raise
        raise Unavailable(*cause) from None


UNREACHABLE_FIX = (
    "check the network or the proxy (HTTPS_PROXY), or prepare it where the hub is "
    "reachable and carry it with 'milabench bundle'"
)
PROBE_TIMEOUT_S = 10.0
_PROBED: dict[str, str | None] = {}


def _unreachable(endpoint: str) -> str | None:
    """Why `endpoint` cannot be reached (no name, refused, timed out), None when it
    answers at all (any HTTP status). Asked once per endpoint and process, so that an
    offline machine says so at once instead of waiting out the hub client's retries for
    every file."""
    if endpoint not in _PROBED:
        import urllib.error
        import urllib.parse
        import urllib.request

        request = urllib.request.Request(endpoint.rstrip("/") + "/api/whoami-v2", method="HEAD")
        try:
            with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S):
                _PROBED[endpoint] = None
        except urllib.error.HTTPError:
            _PROBED[endpoint] = None  # it answered
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            host = urllib.parse.urlsplit(endpoint).netloc or endpoint
            _PROBED[endpoint] = f"{host} unreachable ({reason})"
    return _PROBED[endpoint]


def _download_hub(
    hub: Any, spec: Any, folder: Path, endpoint: str | None, token: str | None
) -> tuple[str, dict[str, dict[str, Any]]]:
    files = _resolve_files(hub, spec, endpoint, token)
    commit: str | None = spec.revision if spec.pinned else None
    records: dict[str, dict[str, Any]] = {}
    folder.mkdir(parents=True, exist_ok=True)
    for rel in files:
        url = hub.hf_hub_url(
            spec.repo_id, rel, repo_type=spec.repo_type, revision=commit or spec.revision,
            endpoint=endpoint,
        )  # fmt: skip
        meta = hub.get_hf_file_metadata(url, token=token, endpoint=endpoint)
        commit = commit or meta.commit_hash
        path = Path(
            hub.hf_hub_download(
                spec.repo_id,
                rel,
                repo_type=spec.repo_type,
                revision=commit,
                local_dir=folder,
                endpoint=endpoint,
                token=token,
            )  # fmt: skip
        )
        size = path.stat().st_size
        if meta.size is not None and size != meta.size:
            _forget_download(folder, rel)
            raise _mismatch(path, rel, "size", str(size), str(meta.size))
        digest = sha256_file(path)
        expected = spec.sha256.get(rel) or (meta.etag if _is_sha256(meta.etag) else None)
        if expected is not None and digest != expected:
            _forget_download(folder, rel)
            raise _mismatch(path, rel, "sha256", digest, expected)
        records[rel] = {"sha256": digest, "size": size}
    return str(commit), records


def _forget_download(folder: Path, rel: str) -> None:
    """Remove huggingface_hub's record of a local-dir download (so it is fetched again)."""
    meta = folder / ".cache" / "huggingface" / "download" / f"{rel}.metadata"
    meta.unlink(missing_ok=True)


def _resolve_files(hub: Any, spec: Any, endpoint: str | None, token: str | None) -> list[str]:
    """The catalogue's paths, patterns expanded against the repository's listing."""
    if not any(_is_pattern(p) for p in spec.files):
        return list(spec.files)
    api = hub.HfApi(endpoint=endpoint, token=token)
    listing = api.list_repo_files(spec.repo_id, revision=spec.revision, repo_type=spec.repo_type)
    chosen: list[str] = []
    for pattern in spec.files:
        if not _is_pattern(pattern):
            chosen.append(pattern)
            continue
        hits = sorted(p for p in listing if matches(pattern, p))
        if not hits:
            raise Unavailable(
                f"no file of {spec.repo_id} at {spec.revision} matches {pattern}",
                "the catalogue's file list is out of date for this revision (report it)",
            )
        chosen += [h for h in hits if h not in chosen]
    return chosen


def _hub_cause(exc: BaseException, spec: Any, token: str | None) -> tuple[str, str] | None:
    """(cause, fix) of an exception of the hub client, or None for anything else."""
    if isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
        raise exc  # the disk, not the hub: `fetch` says so
    module = type(exc).__module__.split(".")[0]
    if module not in ("huggingface_hub", "httpx", "httpx2", "httpcore") and not isinstance(
        exc, OSError
    ):
        return None
    names = {k.__name__ for k in type(exc).__mro__}
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    fix = spec.fix()
    if "GatedRepoError" in names:
        if token is None:
            return f"{spec.repo_id} is gated and no HF_TOKEN is set (HTTP {status})", fix
        if status == 403:
            return (
                f"{spec.repo_id} is gated and this token's account has not been granted "
                "access (licence not accepted, HTTP 403)",
                f"accept the licence at {spec.page} with the token's account",
            )
        return f"the hub refused HF_TOKEN for gated {spec.repo_id} (HTTP {status})", fix
    if "RevisionNotFoundError" in names:
        return f"revision {spec.revision} of {spec.repo_id} not found (HTTP {status})", (
            "the catalogue's revision is not on this hub or mirror (report it)"
        )
    if "RemoteEntryNotFoundError" in names:
        return f"a file of {spec.repo_id} not found at {spec.revision} (HTTP {status})", (
            "the catalogue's file list is out of date for this revision (report it)"
        )
    if "RepositoryNotFoundError" in names:
        if token is None and status == 401:
            return f"{spec.repo_id} needs a token (HTTP 401) and no HF_TOKEN is set", fix
        return f"repository {spec.repo_id} not found (HTTP {status})", fix
    if status == 401 and token is not None:
        return f"the hub refused HF_TOKEN for {spec.repo_id} (HTTP 401)", (
            f"set HF_TOKEN to a valid token of an account that accepted {spec.page}"
        )
    if "OfflineModeIsEnabled" in names:
        return "offline (HF_HUB_OFFLINE=1) and not prepared", OFFLINE_FIX
    if status is not None:
        return f"the hub answered HTTP {status} for {spec.repo_id}", fix
    host = _endpoint_host()
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{host} unreachable ({type(exc).__name__}: {text[:120]})", fix


def _endpoint_host() -> str:
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    return endpoint.split("//", 1)[-1].split("/", 1)[0]


# -- plain URLs ----------------------------------------------------------------------------


def _fetch_url(spec: Any, folder: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """Download `spec`'s files into `folder` (resuming ``.part`` files); verify each."""
    folder.mkdir(parents=True, exist_ok=True)
    records: dict[str, dict[str, Any]] = {}
    for item in spec.files:
        dest = folder / item.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        if not dest.is_file():
            _download_url(mirrored(item.url), part)
            os.replace(part, dest)
        digest = sha256_file(dest)
        if item.sha256 and digest != item.sha256:
            raise _mismatch(dest, item.path, "sha256", digest, item.sha256)
        if item.md5:
            md5 = sha256_file(dest, "md5")
            if md5 != item.md5:
                raise _mismatch(dest, item.path, "md5", md5, item.md5)
        records[item.path] = {"sha256": digest, "size": dest.stat().st_size}
    return spec.revision, records


def mirrored(url: str) -> str:
    """`url` as fetched: ``$MILABENCH_URL_MIRROR/<host>/<path>`` when that variable is
    set (a site mirror of the plain-URL inputs, as ``HF_ENDPOINT`` is of the hub)."""
    mirror = os.environ.get("MILABENCH_URL_MIRROR", "").rstrip("/")
    if not mirror:
        return url
    return f"{mirror}/{url.split('//', 1)[-1]}"


def _download_url(url: str, part: Path) -> None:
    """GET `url` into `part`, resuming with ``Range: bytes=N-`` what is already there
    (also after a cut connection, up to `RETRIES` times in a row without progress)."""
    import http.client
    import urllib.error
    import urllib.request

    host = url.split("//", 1)[-1].split("/", 1)[0]
    stalls = 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        headers = {"User-Agent": "milabench", "Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        request = urllib.request.Request(url, headers=headers)
        before = have
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                if have and response.status != 206:
                    have = 0  # the server ignored the range: start again
                length = response.headers.get("Content-Length")
                total = have + int(length) if length and length.isdigit() else None
                with open(part, "ab" if have else "wb") as out:
                    progress = _Progress(part.name[: -len(".part")], total, have)
                    while block := response.read(CHUNK):
                        out.write(block)
                        have += len(block)
                        progress.update(have)
                    progress.close()
                if total is None or have >= total:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and have:
                return  # the whole file is already here
            raise Unavailable(f"{host} answered HTTP {exc.code} for {url}") from None
        except urllib.error.URLError as exc:
            raise Unavailable(f"{host} unreachable ({exc.reason})") from None
        except (http.client.HTTPException, ConnectionError, TimeoutError):
            pass  # cut mid-body: resume below
        current = part.stat().st_size if part.exists() else 0
        stalls = 0 if current > before else stalls + 1
        if stalls >= RETRIES:
            raise Unavailable(f"{host} cut the download of {url} {RETRIES} times in a row")


class _Progress:
    """A progress line on stderr: redrawn in place on a terminal, else every 10%."""

    def __init__(self, label: str, total: int | None, done: int) -> None:
        self.label, self.total, self.tty = label, total, sys.stderr.isatty()
        self.last = -1
        self.update(done)

    def update(self, done: int) -> None:
        if not self.total:
            return
        percent = min(100, done * 100 // self.total)
        step = percent if self.tty else percent // 10 * 10
        if step == self.last:
            return
        self.last = step
        text = f"{self.label}: {percent:3d}% of {self.total / 2**20:.1f} MiB"
        sys.stderr.write(f"\r{text}" if self.tty else f"{text}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty and self.total:
            sys.stderr.write("\n")
            sys.stderr.flush()
