"""Version preflight across nodes whose base folders differ (real sshd, real venvs).

The worker of the ``ssh_cluster`` fixture is given its own ``base:`` folder, so nothing is
shared with the main node: the environment is synchronised into it like `milabench
install` does, the code is copied by `milabench preflight`, and the versions of both
nodes are compared. One extra ``*.dist-info`` folder in the worker's environment (a
package installed there only) must be named, with both hashes, and fail the command.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from milabench.remote.facts import ENVIRONMENT_KEYS, node_environment, version_differences
from milabench.remote.ssh import ConnectionPool
from milabench.remote.sync import sync_to_workers

pytestmark = pytest.mark.ssh

SUITE = """
demo:
  definition: bench
  install_group: grp
  plan: {method: njobs, n: 1}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dist_info(venv: Path, name: str, version: str) -> Path:
    """A distribution as pip leaves it: ``<name>-<version>.dist-info/METADATA``."""
    site = next(venv.glob("lib/python3*/site-packages"))
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: test\n\nBody\n"
    )
    (folder / "RECORD").write_text("")
    return folder


def _freeze_hash(venv: Path) -> str:
    """The package-list hash computed independently, with importlib.metadata."""
    site = [str(p) for p in venv.glob("lib/python3*/site-packages")]
    lines = sorted(
        {
            f"{re.sub(r'[-_.]+', '-', d.metadata['Name']).lower()}=={d.version}"
            for d in importlib.metadata.distributions(path=site)
        }
    )
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


@pytest.fixture
def two_bases(ssh_cluster, tmp_path, monkeypatch):
    """Main base and worker base in different folders; one venv synced to the worker."""
    monkeypatch.setenv("MILABENCH_FORCE_SSH", "1")
    main_base = tmp_path / "main-base"
    worker_base = tmp_path / "worker-base"
    venv = main_base / "venv" / "grp"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    _dist_info(venv, "demo-pkg", "1.0")
    _dist_info(venv, "Other_Thing", "2.5.post1")
    system = ssh_cluster.system()
    system["nodes"][1]["base"] = str(worker_base)

    async def sync():
        pool = ConnectionPool(system)
        try:
            return await sync_to_workers(system, main_base, [venv], pool=pool)
        finally:
            await pool.close()

    assert asyncio.run(sync()) == {"node1": "rsync"}
    assert (worker_base / "venv" / "grp" / "bin" / "python").exists()
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "main.py").write_text("print('demo')\n")
    (tmp_path / "suite.yaml").write_text(SUITE)
    path = tmp_path / "system.yaml"
    path.write_text(yaml.safe_dump({"system": system}))
    return system, path, main_base, worker_base


def _preflight(tmp_path, system_file, main_base):
    env = dict(os.environ, MILABENCH_FORCE_SSH="1", MILABENCH_MULTINODE_PORT=str(_free_port()))
    return subprocess.run(
        [
            sys.executable, "-m", "milabench", "preflight", "--config",
            str(tmp_path / "suite.yaml"), "--system", str(system_file), "--base",
            str(main_base), "--no-allreduce",
        ],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_node_environment_over_ssh(two_bases):
    """The fleet's ``environment`` object, read on the worker under its own base."""
    system, _, main_base, worker_base = two_bases
    worker = system["nodes"][1]
    env = asyncio.run(node_environment(system, worker, ["grp", "absent"], str(worker_base)))
    assert set(ENVIRONMENT_KEYS) <= set(env)
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["packages"]["grp"] == _freeze_hash(worker_base / "venv" / "grp")
    assert env["packages"]["absent"] is None and env["torch"]["absent"] is None
    assert env["torch"]["grp"] is None  # no torch distribution in this environment
    assert env["cpu_count"] == os.cpu_count() and env["cpu_model"]
    assert env["gpu_count"] == 0 and env["gpu_model"] is None
    # no code pushed to that base yet: nothing to report
    assert env["milabench"] is None and env["milabench_code"] is None
    main = asyncio.run(node_environment(system, system["nodes"][0], ["grp"], str(main_base)))
    import milabench

    assert main["milabench"] == milabench.__version__
    assert main["packages"]["grp"] == env["packages"]["grp"]  # the synced copy


def test_preflight_passes_when_versions_match(two_bases, tmp_path):
    _, system_file, main_base, worker_base = two_bases
    proc = _preflight(tmp_path, system_file, main_base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print("\n" + proc.stdout)
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:3]}
    assert rows["node0"][-2:] == ["local", "ok"]
    assert rows["node1"][-2:] == ["rsync", "ok"]
    versions = [line for line in proc.stdout.splitlines() if line.startswith("versions (node0)")]
    assert versions and "grp: packages" in versions[0], proc.stdout
    # the code was copied under the worker's own base, for the run id "preflight"
    assert (worker_base / "code" / "preflight" / "pkg" / "milabench" / "__init__.py").is_file()


def test_preflight_names_the_node_with_an_extra_package(two_bases, tmp_path):
    _, system_file, main_base, worker_base = two_bases
    worker_venv = worker_base / "venv" / "grp"
    before = _freeze_hash(worker_venv)
    _dist_info(worker_venv, "only-here", "0.1")
    after = _freeze_hash(worker_venv)
    proc = _preflight(tmp_path, system_file, main_base)
    print("\n" + proc.stdout + proc.stderr)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fails = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert fails == [
        f"FAIL node node1: differs from node0: packages[grp] {after[:12]} vs {before[:12]}"
    ]
    assert "node1" in proc.stderr and "Traceback" not in proc.stderr


def test_version_differences_lines():
    ref = {
        "python": "3.11.7",
        "milabench": "0.1.0",
        "milabench_commit": "a" * 40,
        "milabench_code": "b" * 64,
        "torch": {"g": "2.13.0+cpu"},
        "packages": {"g": "c" * 64},
    }
    same = dict(ref)
    other = dict(ref, python="3.12.1", torch={"g": "2.12.0"}, packages={"g": "d" * 64, "h": "e"})
    lines = version_differences({"main": ref, "n1": same, "n2": other}, "main")
    assert list(lines) == ["n2"]
    assert lines["n2"] == (
        "node n2: differs from main: python 3.12.1 vs 3.11.7; torch[g] 2.12.0 vs 2.13.0+cpu; "
        f"packages[g] {'d' * 12} vs {'c' * 12}; packages[h] e vs missing"
    )


def test_run_refuses_the_differing_node(two_bases, tmp_path):
    """What `milabench run` does before its first benchmark (`push_for_run`): the node
    whose environment differs is named, and every later connection to it in this run
    fails at once with that line (the ranks that need it fail, nobody waits)."""
    from milabench.config.loader import load_suite
    from milabench.errors import NodeError
    from milabench.remote.codesync import layout_for, push_for_run
    from milabench.remote.ssh import shared_pool

    system, system_file, main_base, worker_base = two_bases
    _dist_info(worker_base / "venv" / "grp", "only-here", "0.1")
    suite = load_suite(tmp_path / "suite.yaml", system=system_file, base=main_base)
    text = push_for_run(suite, "refusal")
    print("\n" + text)
    lines = text.splitlines()
    assert lines[0] == "code: node1 refused"
    assert lines[1].startswith("warning: node node1: differs from node0: packages[grp] ")
    worker = suite.system["nodes"][1]
    assert layout_for(suite.system, worker) is None

    async def connect():
        await shared_pool(suite.system).connect(worker)

    try:
        with pytest.raises(NodeError, match="refused for this run: node node1: differs"):
            asyncio.run(connect())
    finally:
        asyncio.run(shared_pool(suite.system).close())  # the end of the run

    async def later_run():  # a later run in this process starts afresh
        pool = shared_pool(suite.system)
        try:
            await pool.connect(worker)
        finally:
            await pool.close()

    asyncio.run(later_run())
    # the copy itself was made (under the worker's own base) before the check
    assert (worker_base / "code" / "refusal" / "pkg" / "milabench").is_dir()
