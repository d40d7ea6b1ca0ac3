"""Shared-base detection and copying folders to a worker (SFTP and rsync)."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from milabench.errors import NodeError
from milabench.remote.ssh import ConnectionPool
from milabench.remote.sync import copy_tree, detect_shared_base, sync_phase, sync_to_workers

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
    if method == "rsync" and not shutil.which("rsync"):
        pytest.skip("rsync is not installed")
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
