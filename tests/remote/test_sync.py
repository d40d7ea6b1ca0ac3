"""Shared-base detection and copying folders to a worker (SFTP and rsync)."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
from systemtools import require

from milabench.errors import NodeError
from milabench.remote.ssh import ConnectionPool
from milabench.remote.sync import (
    copy_counted,
    copy_tree,
    detect_shared_base,
    sync_phase,
    sync_to_workers,
)

pytestmark = pytest.mark.ssh


def _tree(root):
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    (root / "bin" / "tool").chmod(0o755)
    os.symlink("tool", root / "bin" / "alias")
    (root / "data with space").mkdir()
    (root / "data with space" / "x.bin").write_bytes(os.urandom(4096))


def _same(a, b):
    for path in a.rglob("*"):
        other = b / path.relative_to(a)
        if path.is_symlink():
            assert other.is_symlink() and os.readlink(other) == os.readlink(path)
        elif path.is_file():
            assert other.read_bytes() == path.read_bytes()
            assert os.stat(other).st_mode == os.stat(path).st_mode


def test_shared_base_detected(ssh_cluster, tmp_path, force_ssh):
    system = ssh_cluster.system()

    async def main():
        pool = ConnectionPool(system)
        try:
            shared = await detect_shared_base(system, tmp_path / "base", pool=pool)
            report = await sync_to_workers(
                system, tmp_path / "base", [tmp_path / "base" / "venv"], pool=pool
            )
            return shared, report
        finally:
            await pool.close()

    shared, report = asyncio.run(main())
    # both "nodes" are this machine: the same folder is seen from each
    assert shared == {"node0": True, "node1": True}
    assert report == {"node0": "shared", "node1": "shared"}
    assert not list((tmp_path / "base").glob(".milabench-shared-*"))


@pytest.mark.parametrize("method", ["sftp", "rsync"])
def test_copy_tree(ssh_cluster, tmp_path, method):
    if method == "rsync":
        require("rsync")
    system = ssh_cluster.system()
    node = system["nodes"][1]
    src = tmp_path / "src"
    _tree(src)
    dst = tmp_path / "copy" / "dest dir"

    async def main():
        pool = ConnectionPool(system)
        try:
            used = await copy_tree(pool, node, src, str(dst), method=method)
            # a repeat is fine (rsync moves nothing, sftp overwrites)
            await copy_tree(pool, node, src, str(dst), method=method)
            return used
        finally:
            await pool.close()

    assert asyncio.run(main()) == method
    _same(src, dst)


def test_sync_unreachable_worker_names_it(ssh_cluster, tmp_path):
    system = ssh_cluster.system()
    system["nodes"].append(
        {"name": "gone", "ip": "127.0.0.3", "port": 9, "user": "root", "local": False}
    )
    with pytest.raises(NodeError, match="gone"):
        asyncio.run(sync_to_workers(system, tmp_path, [tmp_path]))


def test_sync_phase_lines(ssh_cluster, tmp_path, monkeypatch):
    single = {"nodes": [{"name": "here", "ip": "127.0.0.1", "user": "root", "main": True}]}
    assert sync_phase(single, tmp_path, [tmp_path]) == "workers: none (single node)"
    monkeypatch.setenv("MILABENCH_FORCE_SSH", "1")
    line = sync_phase(ssh_cluster.system(), tmp_path, [tmp_path])
    assert line == "workers: node1 shared"


def _run_on(system, node, argv):
    async def main():
        pool = ConnectionPool(system)
        try:
            return await pool.run(node, argv, timeout=120)
        finally:
            await pool.close()

    return asyncio.run(main())


def test_sync_to_another_base_relocates_the_environment(ssh_cluster, tmp_path, force_ssh):
    """A worker with its own ``base:``: the environment lands under it and still works
    there (its scripts name the new interpreter); stale files go, data is only added to."""
    import subprocess
    import sys

    base = tmp_path / "main"
    venv = base / "venv" / "grp"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    (base / "data" / "set-a").mkdir(parents=True)
    (base / "data" / "set-a" / "x").write_text("a")
    stale = venv / "stale.txt"
    stale.write_text("removed on the main node later")
    system = ssh_cluster.system()
    worker = tmp_path / "worker"
    system["nodes"][1]["base"] = str(worker)
    (worker / "data" / "set-b").mkdir(parents=True)  # prepared earlier, by another run

    async def sync():
        pool = ConnectionPool(system)
        try:
            return await sync_to_workers(system, base, [venv, base / "data"], pool=pool)
        finally:
            await pool.close()

    assert asyncio.run(sync()) == {"node0": "shared", "node1": "rsync"}
    there = worker / "venv" / "grp"
    assert (there / "stale.txt").exists()
    pip = (there / "bin" / "pip").read_text().splitlines()[0]
    assert pip == f"#!{there}/bin/python" or pip.startswith(f"#!{there}/bin/python")
    assert str(venv) not in (there / "bin" / "activate").read_text()
    assert (venv / "bin" / "pip").read_text().startswith(f"#!{venv}/bin/python")  # untouched
    result = _run_on(system, system["nodes"][1], [str(there / "bin" / "pip"), "--version"])
    assert result.exit_status == 0, result.stderr
    assert str(there) in result.stdout, result.stdout
    # second sync: the stale file goes from the environment, the worker's data stays
    stale.unlink()
    asyncio.run(sync())
    assert not (there / "stale.txt").exists()
    assert (worker / "data" / "set-a" / "x").read_text() == "a"
    assert (worker / "data" / "set-b").is_dir()
    assert (there / "bin" / "pip").read_text().startswith(f"#!{there}/bin/python")


def test_sftp_mirror_deletes_only_inside(ssh_cluster, tmp_path):
    """SFTP with delete: what the source lost goes, a file replaced by a folder (and the
    reverse) is handled, excluded names and the destination's siblings are kept."""
    system = ssh_cluster.system()
    node = system["nodes"][1]
    src = tmp_path / "src"
    _tree(src)
    (src / "becomes-dir").write_text("file first")
    (src / "becomes-file").mkdir()
    (src / "becomes-file" / "inner").write_text("x")
    dst = tmp_path / "copy" / "dst"
    sibling = tmp_path / "copy" / "sibling.txt"
    sibling.parent.mkdir(parents=True)
    sibling.write_text("next to the destination")

    async def copy():
        pool = ConnectionPool(system)
        try:
            return await copy_counted(
                pool, node, src, str(dst), method="sftp", delete=True, excludes=("*.pyc",)
            )
        finally:
            await pool.close()

    assert asyncio.run(copy())[1] == 5  # tool, alias (a link), x.bin, becomes-*
    _same(src, dst)
    (dst / "cache.pyc").write_bytes(b"made there")
    (dst / "bin" / "extra").write_text("stale")
    (src / "becomes-dir").unlink()
    (src / "becomes-dir").mkdir()
    (src / "becomes-dir" / "f").write_text("now a folder")
    shutil.rmtree(src / "becomes-file")
    (src / "becomes-file").write_text("now a file")
    assert asyncio.run(copy())[1] == 2
    _same(src, dst)
    assert not (dst / "bin" / "extra").exists()
    assert (dst / "cache.pyc").exists() and sibling.exists()
    assert sorted(p.name for p in dst.iterdir()) == sorted(
        ["bin", "data with space", "becomes-dir", "becomes-file", "cache.pyc"]
    )
