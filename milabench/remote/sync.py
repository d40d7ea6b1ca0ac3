"""Making workers see the main node's environments and data after install / prepare.

Three ways, tried in this order for each worker, and reported per node:

* ``shared``: the base directory is on a shared filesystem. Detected by writing a marker
  file with a random name under ``<base>`` on the main node and testing for it on the
  worker over SSH: nothing to copy.
* ``rsync``: ``rsync`` exists here and on the worker: ``rsync -a`` over ``ssh`` with the
  system's key and known_hosts settings (only changed files move on a repeat).
* ``sftp``: otherwise, asyncssh's SFTP client copies the folders recursively (symlinks kept
  as symlinks, modes and times preserved).

Callers (install, prepare) use::

    from milabench.remote.sync import sync_phase
    print(sync_phase(system, base, [base / "venv" / group, base / "data"]))
    # "workers: node1 shared, node2 rsync" (or "workers: none (single node)")

or, inside a running event loop, ``await sync_to_workers(system, base, paths)`` which
returns ``{"node1": "shared" | "rsync" | "sftp", ...}`` for every remote worker.

A worker that cannot be reached raises `NodeError` naming it within ``ssh.connect_timeout``.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

from milabench.errors import NodeError
from milabench.remote.nodes import node_label, node_port, remote_nodes
from milabench.remote.ssh import ConnectionPool, SSHSettings, shared_pool

MARKER_PREFIX = ".milabench-shared-"


async def _worker_has(pool: ConnectionPool, node: dict, path: Path) -> bool:
    result = await pool.run(node, ["test", "-f", str(path)], timeout=30)
    return result.exit_status == 0


async def detect_shared_base(
    system: dict, base: str | Path, *, pool: ConnectionPool | None = None
) -> dict[str, bool]:
    """``{worker name: True when it sees this node's <base>}`` for every remote worker."""
    pool = pool or shared_pool(system)
    base = Path(base).absolute()
    base.mkdir(parents=True, exist_ok=True)
    marker = base / f"{MARKER_PREFIX}{uuid.uuid4().hex}"
    marker.write_text("milabench shared-filesystem probe\n")
    try:
        workers = remote_nodes(system)
        found = await asyncio.gather(*(_worker_has(pool, n, marker) for n in workers))
        return {str(n["name"]): bool(f) for n, f in zip(workers, found, strict=True)}
    finally:
        marker.unlink(missing_ok=True)


async def _has_rsync(pool: ConnectionPool, node: dict) -> bool:
    if shutil.which("rsync") is None or shutil.which("ssh") is None:
        return False
    result = await pool.run(node, ["sh", "-c", "command -v rsync"], timeout=30)
    return result.exit_status == 0


def rsync_argv(settings: SSHSettings, node: dict, src: Path, dst: str) -> list[str]:
    """``rsync -a`` of folder ``src`` to ``dst`` on ``node`` over ssh (argv list)."""
    ssh = ["ssh", "-p", str(node_port(node)), "-o", "BatchMode=yes"]
    ssh += ["-o", f"ConnectTimeout={int(max(settings.connect_timeout, 1))}"]
    if settings.key:
        ssh += ["-i", settings.key, "-o", "IdentitiesOnly=yes"]
    if not settings.strict:
        ssh += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    else:
        ssh += ["-o", "StrictHostKeyChecking=yes"]
        if settings.known_hosts:
            ssh += ["-o", f"UserKnownHostsFile={settings.known_hosts}"]
    target = f"{node['user']}@{node['ip']}:{dst.rstrip('/')}/"
    # --protect-args: the remote path is not split by the remote shell.
    return [
        "rsync",
        "-a",
        "--protect-args",
        "--mkpath",
        "-e",
        shlex.join(ssh),
        f"{str(src).rstrip('/')}/",
        target,
    ]


async def _rsync(settings: SSHSettings, node: dict, src: Path, dst: str) -> None:
    argv = rsync_argv(settings, node, src, dst)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise NodeError(
            f"node {node_label(node)}: rsync of {src} failed "
            f"(exit {proc.returncode}): {err.decode(errors='replace').strip()[-300:]}"
        )


async def _sftp(pool: ConnectionPool, node: dict, src: Path, dst: str) -> None:
    """Walk ``src`` and mirror it under ``dst``: folders, files (mode, times), symlinks."""
    import asyncssh

    conn = await pool.connect(node)
    try:
        async with conn.start_sftp_client() as sftp:
            await sftp.makedirs(dst, exist_ok=True)
            for root, dirs, files in os.walk(src):
                rel = Path(root).relative_to(src)
                target = Path(dst) / rel
                for name in list(dirs):
                    local = Path(root) / name
                    if local.is_symlink():  # os.walk lists links to folders as folders
                        dirs.remove(name)
                        files.append(name)
                    else:
                        await sftp.makedirs(str(target / name), exist_ok=True)
                for name in files:
                    local = Path(root) / name
                    remote = str(target / name)
                    if local.is_symlink():
                        if await sftp.lexists(remote):
                            await sftp.remove(remote)
                        await sftp.symlink(os.readlink(local), remote)
                    else:
                        await sftp.put(str(local), remote, preserve=True)
    except (OSError, asyncssh.Error) as err:
        raise NodeError(f"node {node_label(node)}: SFTP copy of {src} failed: {err}") from err


async def copy_tree(
    pool: ConnectionPool, node: dict, src: Path, dst: str, *, method: str | None = None
) -> str:
    """Copy folder ``src`` to ``dst`` on ``node``; returns the method used."""
    if method is None:
        method = "rsync" if await _has_rsync(pool, node) else "sftp"
    if method == "rsync":
        await _rsync(pool.settings, node, src, dst)
    else:
        await _sftp(pool, node, src, dst)
    return method


async def sync_to_workers(
    system: dict,
    base: str | Path,
    paths: Iterable[str | Path],
    *,
    pool: ConnectionPool | None = None,
) -> dict[str, str]:
    """Make every remote worker hold ``paths`` (folders under ``base``) at the same place.

    Returns ``{worker: "shared" | "rsync" | "sftp"}``. Missing local paths are skipped.
    """
    if not remote_nodes(system):
        return {}
    pool = pool or shared_pool(system)
    shared = await detect_shared_base(system, base, pool=pool)
    folders = [Path(p).absolute() for p in paths]
    folders = [p for p in folders if p.is_dir()]

    async def one(node: dict) -> tuple[str, str]:
        name = str(node["name"])
        if shared.get(name):
            return name, "shared"
        method = "rsync" if await _has_rsync(pool, node) else "sftp"
        for folder in folders:
            await copy_tree(pool, node, folder, str(folder), method=method)
        return name, method

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
