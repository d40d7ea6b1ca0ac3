"""Bringing a node's run folder back to the main node's fleet folder.

The copy uses what `milabench.remote.sync` chose for pushes, in the other direction:

* **local**: the node is this machine, or its base is the main node's own folder (a
  shared filesystem, detected by the code push): a plain copy of the files;
* **rsync**: rsync 3.2.3+ at both ends (`sync.choose_method`), over the same ``ssh``
  command (key, known_hosts, strict checking: `sync.ssh_command`);
* **sftp**: otherwise (rsync missing or old on either side), asyncssh's SFTP client,
  recursively, keeping modes and times.

A run folder holds a few files per benchmark (``.data``, ``.stdout``, ``.stderr``) and the
report: no incremental transfer is needed, so each method copies the whole folder into a
destination that does not exist yet.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
from pathlib import Path

from milabench.config.topology import node_label
from milabench.errors import NodeError
from milabench.remote.sync import choose_method, ssh_command


class MissingRunFolder(NodeError):
    """The node's run command ended without leaving a run folder."""


def _copy_here(src: Path, dst: Path) -> None:
    if not src.is_dir():
        raise MissingRunFolder(f"no run folder at {src}")
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


def count_files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


async def collect_run(
    runner, src: str, dst: Path, *, same_filesystem: bool, timeout: float = 600.0
) -> str:
    """Copy the node's folder ``src`` to ``dst`` on this machine; returns the method used.

    Raises `MissingRunFolder` when ``src`` does not exist, `NodeError` when the copy fails
    (naming the node and the tool's last words).
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        shutil.rmtree(dst)
    if runner.local or same_filesystem:
        await asyncio.to_thread(_copy_here, Path(src), dst)
        return "local"
    code, _, _ = await runner.short(["test", "-d", src])
    if code != 0:
        raise MissingRunFolder(f"no run folder at {src} on the node")
    method = await choose_method(runner.pool, runner.node)
    if method.name == "rsync":
        await asyncio.wait_for(_rsync_pull(runner, src, dst), timeout)
    else:
        await asyncio.wait_for(_sftp_pull(runner, src, dst), timeout)
    return method.name


async def _rsync_pull(runner, src: str, dst: Path) -> None:
    node = runner.node
    argv = ["rsync", "-a", "--protect-args"]
    argv += ["-e", shlex.join(ssh_command(runner.pool.settings, node))]
    argv += [f"{node['user']}@{node['ip']}:{src.rstrip('/')}/", f"{dst}/"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _, err = await proc.communicate()
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise NodeError(
            f"node {node_label(node)}: rsync of {src} back failed (exit {proc.returncode}): "
            f"{err.decode(errors='replace').strip()[-300:]}"
        )


async def _sftp_pull(runner, src: str, dst: Path) -> None:
    import asyncssh

    conn = await runner.pool.connect(runner.node)
    try:
        async with conn.start_sftp_client() as sftp:
            await sftp.get(src, str(dst), recurse=True, preserve=True)
    except (OSError, asyncssh.Error) as err:
        raise NodeError(
            f"node {node_label(runner.node)}: SFTP copy of {src} back failed: {err}"
        ) from err
