"""Making workers hold the main node's folders (environments, data, code) after a phase.

Each worker gets one method, reported per node: ``shared`` (a marker file written under
the main node's base is seen under the worker's: nothing to copy), else ``rsync`` (3.2.3
or newer on both ends, over ``ssh`` with the system's key and known_hosts settings),
else ``sftp`` (asyncssh, the same rules). A folder under the main node's base goes to the
same place under the worker's base (`node_base`), and an environment copied to another
path is relocated there (`RELOCATE_VENV`). ``--delete`` acts inside each synced folder
only; ``<base>/data`` is only added to. Callers use ``sync_phase(system, base, paths)``
or, inside an event loop, ``await sync_to_workers(...)``; a worker that cannot be reached
raises `NodeError` naming it within ``ssh.connect_timeout``. The rules and why:
docs/multinode.md "Install and prepare across nodes" and "Without a shared filesystem".
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from milabench.config.topology import node_label, node_port, remote_nodes
from milabench.errors import ConfigError, NodeError
from milabench.remote.ssh import ConnectionPool, SSHSettings, shared_pool

MARKER_PREFIX = ".milabench-shared-"
RSYNC_MIN = (3, 2, 3)  # --mkpath
RSYNC_IO_TIMEOUT = 300  # seconds without any data moving before rsync gives up
NO_DELETE = ("data",)  # folders directly under the base that are only added to
SFTP_PARALLEL = 16  # files in flight at once per folder (one SSH channel carries them)


# -- where things go on a node ---------------------------------------------------------


def node_base(node: dict, main_base: str | Path) -> str:
    """The base folder of ``node``: its ``base:`` key, else the main node's base.

    One line naming the node when the key is not an absolute path (a relative one would
    depend on the SSH login folder, which nobody chooses on purpose).
    """
    value = node.get("base")
    if value is None or value == "":
        return os.path.normpath(os.path.abspath(os.fspath(main_base)))
    if not isinstance(value, str) or not value.startswith(("/", "~")):
        raise ConfigError(
            f"system file: node {node.get('name')}: base: expected an absolute path, got {value!r}"
        )
    if value.startswith("~"):
        raise ConfigError(
            f"system file: node {node.get('name')}: base: {value!r}: '~' would be expanded "
            "on the main node, not on the worker; write the absolute path"
        )
    return os.path.normpath(value)


def map_to_node(path: str | Path, main_base: str | Path, base_on_node: str) -> str:
    """Where the main node's ``path`` lives on a node whose base is ``base_on_node``."""
    path = os.path.normpath(os.path.abspath(os.fspath(path)))
    main = os.path.normpath(os.path.abspath(os.fspath(main_base)))
    if path == main:
        return base_on_node
    if path.startswith(main.rstrip("/") + "/"):
        return base_on_node.rstrip("/") + path[len(main.rstrip("/")) :]
    return path


def excluded(name: str, excludes: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in excludes)


# -- shared filesystem ------------------------------------------------------------------


@contextmanager
def shared_marker(base: str | Path) -> Iterator[str]:
    """Write a marker file with a random name under ``base``; yield its name; remove it."""
    base = Path(base).absolute()
    base.mkdir(parents=True, exist_ok=True)
    name = f"{MARKER_PREFIX}{uuid.uuid4().hex}"
    (base / name).write_text("milabench shared-filesystem probe\n")
    try:
        yield name
    finally:
        (base / name).unlink(missing_ok=True)


async def sees_marker(pool: ConnectionPool, node: dict, base: str | Path, marker: str) -> bool:
    """True when ``node`` finds ``marker`` (of `shared_marker`) under its own base."""
    path = f"{node_base(node, base).rstrip('/')}/{marker}"
    result = await pool.run(node, ["test", "-f", path], timeout=30)
    return result.exit_status == 0


async def detect_shared_base(
    system: dict,
    base: str | Path,
    *,
    pool: ConnectionPool | None = None,
    nodes: list[dict] | None = None,
) -> dict[str, bool]:
    """``{worker name: True when its base folder is this node's <base>}``.

    The marker is written under the main node's base and looked for under the worker's
    own base (`node_base`): a worker whose base is another folder on the same machine, or
    the same path on a disk of its own, is not shared.
    """
    pool = pool if pool is not None else shared_pool(system)
    workers = remote_nodes(system) if nodes is None else nodes
    with shared_marker(base) as marker:
        found = await asyncio.gather(*(sees_marker(pool, n, base, marker) for n in workers))
    return {str(n["name"]): bool(f) for n, f in zip(workers, found, strict=True)}


# -- choosing rsync or sftp -------------------------------------------------------------

_VERSION = re.compile(r"rsync\s+version\s+v?(\d+)\.(\d+)\.(\d+)")


def parse_rsync_version(text: str) -> tuple[int, int, int] | None:
    """``(3, 2, 7)`` from the first line of ``rsync --version``, None if not found."""
    found = _VERSION.search(text or "")
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def _version_text(version: tuple[int, ...] | None) -> str:
    return ".".join(str(v) for v in version) if version else "missing"


_LOCAL_RSYNC: dict[str, tuple[int, int, int] | None] = {}


def local_rsync_version() -> tuple[int, int, int] | None:
    """The version of this node's ``rsync`` (None when absent), asked once per process."""
    if "v" not in _LOCAL_RSYNC:
        exe = shutil.which("rsync")
        version = None
        if exe and shutil.which("ssh"):
            try:
                done = subprocess.run(
                    [exe, "--version"], capture_output=True, text=True, timeout=30, check=False
                )
                version = parse_rsync_version(done.stdout)
            except (OSError, subprocess.TimeoutExpired):
                version = None
        _LOCAL_RSYNC["v"] = version
    return _LOCAL_RSYNC["v"]


async def remote_rsync_version(pool: ConnectionPool, node: dict) -> tuple[int, int, int] | None:
    """The version of the ``rsync`` the node's login shell finds (None when absent).

    The same shell starts ``rsync --server`` during a copy, so the same PATH decides.
    """
    result = await pool.run(node, ["rsync", "--version"], timeout=30)
    if result.exit_status != 0:
        return None
    return parse_rsync_version(str(result.stdout or ""))


@dataclass(frozen=True)
class Method:
    """How one worker is reached for copies, and why (shown when it is not rsync)."""

    name: str  # "rsync" | "sftp"
    local: tuple[int, int, int] | None = None
    remote: tuple[int, int, int] | None = None

    @property
    def why(self) -> str:
        return f"rsync here {_version_text(self.local)}, there {_version_text(self.remote)}"


async def choose_method(pool: ConnectionPool, node: dict) -> Method:
    """rsync when both ends have rsync >= 3.2.3 (and ssh exists here), else sftp."""
    local = local_rsync_version()
    remote = await remote_rsync_version(pool, node)
    usable = local is not None and remote is not None and min(local, remote) >= RSYNC_MIN
    return Method("rsync" if usable else "sftp", local, remote)


# -- rsync ------------------------------------------------------------------------------


def ssh_command(settings: SSHSettings, node: dict) -> list[str]:
    """The ``ssh`` client command rsync uses (``-e``): same key and host-key rules."""
    ssh = ["ssh", "-p", str(node_port(node)), "-o", "BatchMode=yes"]
    ssh += ["-o", f"ConnectTimeout={int(max(settings.connect_timeout, 1))}"]
    ssh += ["-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
    if settings.key:
        ssh += ["-i", settings.key, "-o", "IdentitiesOnly=yes"]
    if not settings.strict:
        ssh += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    else:
        ssh += ["-o", "StrictHostKeyChecking=yes"]
        if settings.known_hosts:
            ssh += ["-o", f"UserKnownHostsFile={settings.known_hosts}"]
    return ssh


def rsync_argv(
    settings: SSHSettings,
    node: dict,
    src: Path,
    dst: str,
    *,
    version: tuple[int, int, int] | None = RSYNC_MIN,
    delete: bool = False,
    excludes: Sequence[str] = (),
    is_dir: bool = True,
) -> list[str]:
    """``rsync -a`` of ``src`` (a folder, or a file with ``is_dir=False``) to ``dst`` on
    ``node`` over ssh, as an argv list.

    ``--mkpath`` only when ``version`` (the older of the two ends) is 3.2.3 or newer;
    ``--delete`` removes, inside ``dst`` only, what ``src`` does not have (excluded names
    are kept: rsync deletes excluded files only with ``--delete-excluded``).
    """
    # --timeout: rsync gives up after that long without any data moving (a hung node),
    # never because a large copy takes long.
    argv = ["rsync", "-a", "--protect-args", "--stats", f"--timeout={RSYNC_IO_TIMEOUT}"]
    if version is not None and version >= RSYNC_MIN:
        argv.append("--mkpath")
    if delete and is_dir:
        argv.append("--delete")
    argv += [f"--exclude={pattern}" for pattern in excludes]
    argv += ["-e", shlex.join(ssh_command(settings, node))]
    if is_dir:
        source = f"{str(src).rstrip('/')}/"
        target = f"{node['user']}@{node['ip']}:{dst.rstrip('/')}/"
    else:
        source = str(src)
        target = f"{node['user']}@{node['ip']}:{dst}"
    return [*argv, source, target]


_TRANSFERRED = re.compile(r"Number of (?:regular )?files transferred:\s*([\d,.]+)")


def transferred_files(stats: str) -> int:
    """Files rsync copied, from its ``--stats`` block (0 when not printed)."""
    found = _TRANSFERRED.search(stats or "")
    return int(re.sub(r"[,.]", "", found[1])) if found else 0


async def _rsync(
    settings: SSHSettings,
    node: dict,
    src: Path,
    dst: str,
    *,
    delete: bool,
    excludes: Sequence[str],
    version: tuple[int, int, int] | None,
) -> int:
    argv = rsync_argv(
        settings,
        node,
        src,
        dst,
        version=version,
        delete=delete,
        excludes=excludes,
        is_dir=src.is_dir(),
    )
    return await _run_rsync(argv, node, str(src))


def rsync_relative_argv(
    settings: SSHSettings,
    node: dict,
    items: Sequence[tuple[Path, str]],
    dst: str,
    *,
    version: tuple[int, int, int] | None = RSYNC_MIN,
    delete: bool = False,
    excludes: Sequence[str] = (),
) -> list[str]:
    """One ``rsync -aR`` putting each ``(local path, relative name)`` at ``dst/<name>``.

    Each local path must end with its relative name; the part before it is marked with
    ``/./`` (rsync's anchor), so one SSH connection carries every item. ``--delete`` then
    acts inside each named folder only: the folders above it (rsync's *implied*
    directories) and their other entries are left alone, and ``--no-implied-dirs`` creates
    those with default modes (as SFTP does) instead of copying the main node's (``/tmp``'s
    sticky 1777, a private 0700).
    """
    argv = rsync_argv(settings, node, Path("/"), dst, version=version, excludes=excludes)[:-2]
    argv[1:1] = ["--relative", "--no-implied-dirs"]
    if delete:
        argv.insert(3, "--delete")
    sources = []
    for local, rel in items:
        text = str(local)
        rel = rel.strip("/")
        if not rel or ".." in Path(rel).parts or not text.endswith("/" + rel):
            raise ValueError(f"{local} does not end with {rel!r}")
        # a folder ends with "/": its contents are sent even when it is a symlink
        sources.append(f"{text[: -len(rel)]}./{rel}" + ("/" if local.is_dir() else ""))
    return [*argv, *sources, f"{node['user']}@{node['ip']}:{dst.rstrip('/')}/"]


async def _run_rsync(argv: list[str], node: dict, what: str) -> int:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await proc.communicate()
    except asyncio.CancelledError:
        # rsync leads its own process group: its ssh client goes with it
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise NodeError(
            f"node {node_label(node)}: rsync of {what} failed "
            f"(exit {proc.returncode}): {err.decode(errors='replace').strip()[-300:]}"
        )
    return transferred_files(out.decode(errors="replace"))


async def copy_many(
    pool: ConnectionPool,
    node: dict,
    items: Sequence[tuple[Path, str]],
    dst: str,
    *,
    method: Method,
    delete: bool = False,
    excludes: Sequence[str] = (),
) -> int:
    """Put each ``(local folder or file, relative name)`` at ``dst/<name>`` on ``node``.

    rsync: one call (one SSH connection) for all items (`rsync_relative_argv`); SFTP: one
    mirror per item over the pooled connection. Returns the files copied.
    """
    if not items:
        return 0
    if method.name == "rsync":
        version = min(method.local or RSYNC_MIN, method.remote or RSYNC_MIN)
        argv = rsync_relative_argv(
            pool.settings, node, items, dst, version=version, delete=delete, excludes=excludes
        )
        return await _run_rsync(argv, node, ", ".join(str(p) for p, _ in items))
    count = 0
    for local, rel in items:
        target = f"{dst.rstrip('/')}/{rel.strip('/')}"
        count += await _sftp(pool, node, local, target, delete=delete, excludes=excludes)
    return count


# -- sftp -------------------------------------------------------------------------------


def _kind(attrs) -> str:
    """``dir``, ``link``, ``file`` or ``other`` for an SFTP entry's attributes."""
    mode = getattr(attrs, "permissions", None)
    if mode is not None and stat.S_IFMT(mode):
        if stat.S_ISLNK(mode):
            return "link"
        if stat.S_ISDIR(mode):
            return "dir"
        if stat.S_ISREG(mode):
            return "file"
        return "other"
    import asyncssh

    return {
        asyncssh.FILEXFER_TYPE_DIRECTORY: "dir",
        asyncssh.FILEXFER_TYPE_SYMLINK: "link",
        asyncssh.FILEXFER_TYPE_REGULAR: "file",
    }.get(getattr(attrs, "type", None), "other")


async def _remove(sftp, path: str, kind: str) -> None:
    if kind == "dir":
        await sftp.rmtree(path)
    else:
        await sftp.remove(path)


async def _listing(sftp, folder: str) -> dict[str, object]:
    """``{name: attrs}`` of a remote folder (lstat semantics: links are links)."""
    entries = await sftp.readdir(folder)
    return {str(e.filename): e.attrs for e in entries if e.filename not in (".", "..")}


async def sftp_mirror(
    sftp, src: Path, dst: str, *, delete: bool, excludes: Sequence[str] = ()
) -> int:
    """Make the remote folder ``dst`` a copy of the local folder ``src``; files copied.

    rsync's quick check decides what moves (size and modification time, to the second);
    with ``delete`` whatever ``dst`` holds that ``src`` does not (excluded names apart) is
    removed. Never touches anything outside ``dst``.
    """
    await sftp.makedirs(dst, exist_ok=True)
    limit = asyncio.Semaphore(SFTP_PARALLEL)
    copied = 0

    async def put(local: Path, remote: str) -> None:
        async with limit:
            await sftp.put(str(local), remote, preserve=True)

    async def mirror(local_dir: Path, remote_dir: str) -> None:
        nonlocal copied
        there = await _listing(sftp, remote_dir)
        here = sorted(os.scandir(local_dir), key=lambda e: e.name)
        names = set()
        uploads = []
        subdirs = []
        for item in here:
            if excluded(item.name, excludes):
                continue
            names.add(item.name)
            remote = str(PurePosixPath(remote_dir) / item.name)
            attrs = there.get(item.name)
            kind = _kind(attrs) if attrs is not None else None
            if item.is_symlink():
                target = os.readlink(item.path)
                if kind == "link" and await sftp.readlink(remote) == target:
                    continue
                if kind is not None:
                    await _remove(sftp, remote, kind)
                await sftp.symlink(target, remote)
                copied += 1
            elif item.is_dir():
                if kind not in (None, "dir"):
                    await _remove(sftp, remote, kind)
                    kind = None
                if kind is None:
                    await sftp.mkdir(remote)
                subdirs.append((Path(item.path), remote))
            else:
                st = item.stat(follow_symlinks=False)
                if (
                    kind == "file"
                    and attrs.size == st.st_size
                    and attrs.mtime is not None
                    and int(attrs.mtime) == int(st.st_mtime)
                ):
                    if attrs.permissions is not None and stat.S_IMODE(
                        attrs.permissions
                    ) != stat.S_IMODE(st.st_mode):
                        await sftp.chmod(remote, stat.S_IMODE(st.st_mode))
                    continue
                if kind not in (None, "file"):
                    await _remove(sftp, remote, kind)
                uploads.append(put(Path(item.path), remote))
                copied += 1
        await asyncio.gather(*uploads)
        if delete:
            for name, attrs in there.items():
                if name not in names and not excluded(name, excludes):
                    await _remove(sftp, str(PurePosixPath(remote_dir) / name), _kind(attrs))
        for local, remote in subdirs:
            await mirror(local, remote)
        mode = stat.S_IMODE(os.stat(local_dir).st_mode)
        await sftp.chmod(remote_dir, mode)

    await mirror(src, dst)
    return copied


async def _sftp(
    pool: ConnectionPool,
    node: dict,
    src: Path,
    dst: str,
    *,
    delete: bool = False,
    excludes: Sequence[str] = (),
) -> int:
    """Mirror ``src`` (a folder, or one file) at ``dst`` on ``node`` through SFTP."""
    import asyncssh

    conn = await pool.connect(node)
    try:
        async with conn.start_sftp_client() as sftp:
            if src.is_dir():
                return await sftp_mirror(sftp, src, dst, delete=delete, excludes=excludes)
            await sftp.makedirs(str(PurePosixPath(dst).parent), exist_ok=True)
            st = src.stat()
            try:
                attrs = await sftp.lstat(dst)
            except asyncssh.SFTPNoSuchFile:
                attrs = None
            if (
                attrs is not None
                and _kind(attrs) == "file"
                and attrs.size == st.st_size
                and int(attrs.mtime or 0) == int(st.st_mtime)
            ):
                return 0
            if attrs is not None and _kind(attrs) != "file":
                await _remove(sftp, dst, _kind(attrs))
            await sftp.put(str(src), dst, preserve=True)
            return 1
    except (OSError, asyncssh.Error) as err:
        raise NodeError(f"node {node_label(node)}: SFTP copy of {src} failed: {err}") from err


async def copy_tree(
    pool: ConnectionPool,
    node: dict,
    src: Path,
    dst: str,
    *,
    method: str | Method | None = None,
    delete: bool = False,
    excludes: Sequence[str] = (),
) -> str:
    """Copy ``src`` (folder or file) to ``dst`` on ``node``; returns the method used."""
    return (
        await copy_counted(pool, node, src, dst, method=method, delete=delete, excludes=excludes)
    )[0]


async def copy_counted(
    pool: ConnectionPool,
    node: dict,
    src: Path,
    dst: str,
    *,
    method: str | Method | None = None,
    delete: bool = False,
    excludes: Sequence[str] = (),
) -> tuple[str, int]:
    """`copy_tree` that also returns how many files (and links) were copied."""
    if method is None:
        method = await choose_method(pool, node)
    if isinstance(method, str):
        method = Method(method, RSYNC_MIN, RSYNC_MIN) if method == "rsync" else Method(method)
    if method.name == "rsync":
        version = min(method.local or RSYNC_MIN, method.remote or RSYNC_MIN)
        count = await _rsync(
            pool.settings, node, src, dst, delete=delete, excludes=excludes, version=version
        )
    else:
        count = await _sftp(pool, node, src, dst, delete=delete, excludes=excludes)
    return method.name, count


# -- environments moved to another path --------------------------------------------------

# Run on the node by the copied environment's own interpreter: rewrite the old
# environment path in the shebang scripts and activate scripts of bin/ (text only; a
# binary is never touched), keeping each file's mode and modification time.
RELOCATE_VENV = r"""
import os, sys
old, new = sys.argv[1].encode(), sys.argv[2].encode()
bindir = os.path.join(sys.argv[2], "bin")
changed = 0
for name in sorted(os.listdir(bindir)):
    path = os.path.join(bindir, name)
    if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 1 << 20:
        continue
    with open(path, "rb") as f:
        data = f.read()
    if not (data.startswith(b"#!") or name.startswith("activate")) or old not in data:
        continue
    st = os.stat(path)
    with open(path, "wb") as f:
        f.write(data.replace(old, new))
    os.chmod(path, st.st_mode & 0o7777)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    changed += 1
print(changed)
"""


def _is_venv(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").is_file() and (folder / "bin").is_dir()


async def relocate_venv(pool: ConnectionPool, node: dict, old: str, new: str) -> int:
    """Point the scripts of the environment copied from ``old`` to ``new`` at ``new``."""
    python = f"{new.rstrip('/')}/bin/python"
    result = await pool.run(node, [python, "-c", RELOCATE_VENV, old, new], timeout=120)
    if result.exit_status != 0:
        raise NodeError(
            f"node {node_label(node)}: could not relocate the environment {new}: "
            f"{str(result.stderr or '').strip()[-300:]}"
        )
    return int(str(result.stdout or "0").strip() or 0)


# -- the phase helpers -------------------------------------------------------------------


async def sync_to_workers(
    system: dict,
    base: str | Path,
    paths: Iterable[str | Path],
    *,
    pool: ConnectionPool | None = None,
    delete: bool = True,
) -> dict[str, str]:
    """Make every remote worker hold ``paths`` (folders under ``base``) under its base.

    Returns ``{worker: "shared" | "rsync" | "sftp"}``. Missing local paths are skipped.
    With ``delete`` (the default), stale files inside each copied folder are removed,
    except in the folders of `NO_DELETE` (datasets of other benchmarks are not stale).
    """
    if not remote_nodes(system):
        return {}
    pool = pool if pool is not None else shared_pool(system)
    base = Path(base).absolute()
    shared = await detect_shared_base(system, base, pool=pool)
    folders = [Path(p).absolute() for p in paths]
    folders = [p for p in folders if p.is_dir()]
    keep = {str(base / name) for name in NO_DELETE}

    async def one(node: dict) -> tuple[str, str]:
        name = str(node["name"])
        if shared.get(name):
            return name, "shared"
        method = await choose_method(pool, node)
        there = node_base(node, base)
        for folder in folders:
            dst = map_to_node(folder, base, there)
            await copy_counted(
                pool,
                node,
                folder,
                dst,
                method=method,
                delete=delete and str(folder) not in keep,
            )
            if dst != str(folder) and _is_venv(folder):
                await relocate_venv(pool, node, str(folder), dst)
        return name, method.name

    results = await asyncio.gather(*(one(n) for n in remote_nodes(system)))
    return dict(results)


def sync_phase(system: dict, base: str | Path, paths: Iterable[str | Path]) -> str:
    """Blocking form for the install / prepare commands; returns the line to print.

    A single-node system returns at once without importing or connecting anything.
    """
    if not remote_nodes(system):
        return describe_sync({})

    async def main() -> dict[str, str]:
        pool = ConnectionPool(system)
        try:
            return await sync_to_workers(system, base, paths, pool=pool)
        finally:
            await pool.close()

    return describe_sync(asyncio.run(main()))


def describe_sync(report: dict[str, str]) -> str:
    """One line for the phase's output: ``workers: node1 shared, node2 rsync``."""
    if not report:
        return "workers: none (single node)"
    return "workers: " + ", ".join(f"{k} {v}" for k, v in report.items())
