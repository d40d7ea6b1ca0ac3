"""Code on workers that do not share the main node's filesystem (real sshd, real rsync).

Two more OpenSSH servers join the two of the ``ssh_cluster`` fixture, both started inside
a private mount namespace (``unshare --mount``) in which a tmpfs covers the main node's
folders of these tests *and* the milabench clone itself: a worker that still used a
main-node path would find nothing there. One of them (``bare``) also has no rsync: its
sshd gives every session ``PATH=<a folder with every command of /usr/bin and /usr/sbin
except rsync>`` (``SetEnv``), so the login shell cannot find it, as on a node without
the package; the copies to it go through SFTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from sshnodes import folders_to_hide, free_port, path_without, setenv_line
from systemtools import cannot_run_here, require, unavailable

from milabench.errors import ConfigError, UsageError
from milabench.events import read_events
from milabench.remote.codesync import (
    CodeLayout,
    activate,
    describe_push,
    layout_for,
    push_code,
)
from milabench.remote.facts import local_package_dir
from milabench.remote.ssh import SSHSettings
from milabench.remote.sync import parse_rsync_version, rsync_argv, transferred_files

pytestmark = pytest.mark.ssh

HERE = Path(__file__).parent


_free_port = free_port  # tests/sshnodes.py


def _wait_listening(host: str, port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            unavailable(f"sshd on {host} exited with {proc.returncode}: {log.read_text()[-500:]}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    unavailable(f"sshd on {host}:{port} did not listen: {log.read_text()[-500:]}")


@dataclass
class Isolated:
    """The main node's test folder, the workers' base folders, and a system builder."""

    root: Path
    main: Path  # hidden from the extra workers
    nodes: dict[str, dict]
    known_hosts: Path
    client_key: Path
    main_node: dict

    def system(self, *workers: str, bases: dict[str, str] | None = None) -> dict:
        nodes = [dict(self.main_node)]
        for name in workers:
            node = dict(self.nodes[name])
            node["base"] = (bases or {}).get(name, str(self.root / "workers" / name))
            nodes.append(node)
        return {
            "arch": "cpu",
            "sshkey": str(self.client_key),
            "nodes": nodes,
            "options": {"ssh": {"known_hosts": str(self.known_hosts)}},
        }


@pytest.fixture(scope="module")
def isolated(ssh_cluster, tmp_path_factory):
    tools = require("unshare", "rsync", "sshd")
    sshd = tools["sshd"]
    root = tmp_path_factory.mktemp("codesync")
    main = root / "main"
    main.mkdir()
    (root / "workers").mkdir()
    hide = [str(main), *folders_to_hide(local_package_dir())]
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "mount", "-t", "tmpfs", "x", str(main)],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        cannot_run_here(f"no private mount namespace: {probe.stderr.strip()}")
    tmp = ssh_cluster.tmp
    known = root / "known_hosts"
    lines = [ssh_cluster.known_hosts.read_text().rstrip("\n")]
    nodes: dict[str, dict] = {}
    procs: list[subprocess.Popen] = []
    specs = [("iso", "127.0.0.5", None), ("bare", "127.0.0.6", path_without(root / "path"))]
    try:
        for name, host, path in specs:
            port = _free_port(host)
            cfg = root / f"sshd_{name}.conf"
            settings = [
                f"Port {port}",
                f"ListenAddress {host}",
                f"HostKey {tmp / 'host_ed25519'}",
                f"PidFile {root / f'sshd_{name}.pid'}",
                "UsePAM no",
                "PermitRootLogin yes",
                "StrictModes no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                f"AuthorizedKeysFile {tmp / 'authorized_keys'}",
                "MaxSessions 100",
                "MaxStartups 100",
                "Subsystem sftp internal-sftp",
                "LogLevel ERROR",
            ]
            settings.append(setenv_line({"PATH": path} if path else {}))
            cfg.write_text("\n".join(settings) + "\n")
            script = (
                'cfg=$1; sshd=$2; shift 2; for d in "$@"; do '
                'mount -t tmpfs -o size=1m,mode=0755 milabench-hidden "$d" || exit 97; done; '
                'exec "$sshd" -D -e -f "$cfg"'
            )
            log = root / f"sshd_{name}.log"
            with open(log, "w") as out:
                proc = subprocess.Popen(
                    ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
                    + [str(cfg), sshd, *hide],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            procs.append(proc)
            _wait_listening(host, port, proc, log)
            nodes[name] = {"name": name, "ip": host, "port": port, "user": "root", "local": False}
            lines.append(f"[{host}]:{port} {ssh_cluster.host_pub}")
        known.write_text("\n".join(lines) + "\n")
        main_node = dict(ssh_cluster.nodes[0])
        yield Isolated(root, main, nodes, known, ssh_cluster.client_key, main_node)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _sources(folder: Path) -> tuple[Path, Path]:
    """A benchmark folder (files, a sub-folder, a link, a mode) and a suite file."""
    bench = folder / "benchmarks" / "demo"
    (bench / "sub").mkdir(parents=True)
    (bench / "main.py").write_text("print('demo')\n")
    (bench / "run.sh").write_text("#!/bin/sh\necho run\n")
    (bench / "run.sh").chmod(0o755)
    (bench / "sub" / "weights.bin").write_bytes(os.urandom(50_000))
    (bench / "old.txt").write_text("soon stale\n")
    (bench / "__pycache__").mkdir()
    (bench / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"not copied")
    os.symlink("main.py", bench / "entry.py")
    suite = folder / "config" / "suite.yaml"
    suite.parent.mkdir()
    suite.write_text("demo:\n  definition: ../benchmarks/demo\n")
    return bench, suite


def _worker_sees(system, node, path) -> bool:
    from milabench.remote.ssh import ConnectionPool

    async def main():
        pool = ConnectionPool(system)
        try:
            return (await pool.run(node, ["test", "-e", str(path)])).exit_status == 0
        finally:
            await pool.close()

    return asyncio.run(main())


def _push(system, base, run_id, paths, node):
    return asyncio.run(push_code(system, base, run_id, paths, nodes=[node]))[node["name"]]


def _listing(root: Path) -> dict[str, tuple]:
    """What a copy holds: kind, content or link target, mode, mtime to the second."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        st = path.lstat()
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = ("dir", oct(st.st_mode & 0o7777))
        else:
            found[rel] = ("file", path.read_bytes(), oct(st.st_mode & 0o7777), int(st.st_mtime))
    return found


@pytest.mark.parametrize("worker", ["iso", "bare"])
def test_code_lands_under_the_worker_base(isolated, tmp_path, worker):
    folder = isolated.main / f"push-{worker}"
    bench, suite = _sources(folder)
    base = folder / "base"
    base.mkdir()
    system = isolated.system(worker)
    node = system["nodes"][1]
    layout = _push(system, base, "run-1", [bench, suite], node)

    assert layout.method == ("rsync" if worker == "iso" else "sftp"), layout
    if worker == "bare":
        assert "there missing" in layout.why and "sftp" in describe_push({worker: layout})
    root = Path(node["base"]) / "code" / "run-1"
    assert layout.root == str(root)
    assert layout.package_dir == str(root / "pkg")
    copy = Path(layout.remote_path(bench))
    assert copy == root / "tree" / str(bench).lstrip("/")
    assert (copy / "main.py").read_text() == "print('demo')\n"
    assert os.readlink(copy / "entry.py") == "main.py"
    assert os.stat(copy / "run.sh").st_mode & 0o777 == 0o755
    assert not (copy / "__pycache__").exists()
    assert Path(layout.remote_path(suite)).read_text() == suite.read_text()
    assert layout.remote_path(bench / "sub" / "weights.bin") == str(copy / "sub" / "weights.bin")
    pkg = Path(layout.package_dir)
    assert (pkg / "milabench" / "__init__.py").is_file() and (pkg / "benchkit").is_dir()
    assert (pkg / "benchshared" / "vision.py").is_file()
    assert (pkg / "pyproject.toml").is_file()
    stamp = json.loads((pkg / ".milabench-code.json").read_text())
    assert stamp["run_id"] == "run-1" and stamp["version"]
    # the main node's base maps to the worker's; other paths are left alone
    assert layout.remote_path(base / "data" / "x") == f"{node['base']}/data/x"
    assert layout.remote_path("/usr/bin/env") == "/usr/bin/env"
    assert layout.transferred > 0
    # the worker really cannot see the main node's folder (private mount namespace)
    assert _worker_sees(system, node, bench) is False
    assert _worker_sees(system, node, copy / "main.py") is True

    # second push: a stale file goes, a changed file moves, the rest is not copied again
    kept = os.stat(copy / "sub" / "weights.bin").st_ino
    pkg_file = pkg / "milabench" / "__init__.py"
    pkg_inode = os.stat(pkg_file).st_ino
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"made on the worker")
    outside = root / "tree" / "keep-me.txt"
    outside.write_text("not in a synced folder\n")
    (bench / "old.txt").unlink()
    (bench / "main.py").write_text("print('demo, edited')\n")
    os.utime(bench / "main.py", (time.time() + 5, time.time() + 5))
    again = _push(system, base, "run-1", [bench, suite], node)
    assert not (copy / "old.txt").exists()
    assert (copy / "main.py").read_text() == "print('demo, edited')\n"
    assert os.stat(copy / "sub" / "weights.bin").st_ino == kept
    assert os.stat(pkg_file).st_ino == pkg_inode
    assert outside.exists(), "--delete reached outside the synced folders"
    assert (copy / "__pycache__" / "main.cpython-311.pyc").exists(), "excluded names are kept"
    assert 1 <= again.transferred < layout.transferred, (again.transferred, layout.transferred)


def test_sftp_copy_is_identical_to_rsync(isolated):
    """The same sources pushed to the node with rsync and to the one without."""
    folder = isolated.main / "same"
    bench, suite = _sources(folder)
    base = folder / "base"
    base.mkdir()
    system = isolated.system("iso", "bare")
    layouts = asyncio.run(
        push_code(system, base, "same", [bench, suite], nodes=system["nodes"][1:])
    )
    assert {k: v.method for k, v in layouts.items()} == {"iso": "rsync", "bare": "sftp"}
    by_rsync = _listing(Path(layouts["iso"].root))
    by_sftp = _listing(Path(layouts["bare"].root))
    by_rsync.pop("pkg/.milabench-code.json")
    by_sftp.pop("pkg/.milabench-code.json")
    assert by_rsync.keys() == by_sftp.keys()
    assert by_rsync == by_sftp


def test_shared_base_copies_nothing(ssh_cluster, tmp_path, force_ssh):
    """A worker whose base is the main node's folder (same machine): identity layout."""
    system = ssh_cluster.system()
    base = tmp_path / "base"
    bench, suite = _sources(tmp_path / "src")
    layouts = asyncio.run(push_code(system, base, "r", [bench, suite]))
    assert {k: v.method for k, v in layouts.items()} == {"node0": "shared", "node1": "shared"}
    layout = layouts["node1"]
    assert layout.remote_path(bench) == str(bench)
    assert layout.translate(f"--data={base}/data") == f"--data={base}/data"
    assert not (base / "code").exists()
    # the same machine, but the worker names another base: that one is not shared
    system["nodes"][1]["base"] = str(tmp_path / "other")
    layouts = asyncio.run(push_code(system, base, "r", [bench, suite]))
    assert layouts["node1"].method == "rsync"
    assert (tmp_path / "other" / "code" / "r" / "tree" / str(bench).lstrip("/")).is_dir()


def test_bad_base_and_run_id_are_one_line(ssh_cluster, tmp_path):
    system = ssh_cluster.system()
    system["nodes"][1]["base"] = "relative/folder"
    with pytest.raises(ConfigError, match="node node1: base: expected an absolute path"):
        asyncio.run(push_code(system, tmp_path, "r", [], nodes=[system["nodes"][1]]))
    with pytest.raises(UsageError, match="run id"):
        asyncio.run(push_code(ssh_cluster.system(), tmp_path, "../up", []))


def test_layout_translates_argv_env_and_config():
    """What the SSH launcher does with a spec for a node with a copied layout."""
    from milabench.plan.spec import ProcessSpec
    from milabench.remote.launcher import SSHLauncher

    layout = CodeLayout(
        root="/w/code/r1",
        package_dir="/w/code/r1/pkg",
        node="n1",
        method="rsync",
        mapping=(
            ("/m/src/benchmarks/demo", "/w/code/r1/tree/m/src/benchmarks/demo"),
            ("/m/base", "/w"),
        ),
    )
    system = {"nodes": [{"name": "n0", "ip": "10.0.0.1", "user": "u", "main": True}]}
    node = {"name": "n1", "ip": "10.0.0.2", "user": "u"}
    system["nodes"].append(node)
    config = {"definition": "/m/src/benchmarks/demo", "dirs": {"data": "/m/base/data"}, "n": 3}
    spec = ProcessSpec(
        tag=["demo", "0", "n1"],
        argv=[
            "/m/base/venv/torch/bin/torchrun",
            "--nnodes=2",
            "/m/src/benchmarks/demo/main.py",
            "--data=/m/base/data/x",
            "/m/base/../elsewhere",
        ],
        env={
            "VOIRFILE": "/m/src/benchmarks/demo/voirfile.py",
            "PATH": "/m/base/venv/torch/bin:/usr/bin",
            "MILABENCH_CONFIG": json.dumps(config),
            "PYTHONPATH": "/m/src/benchmarks/demo/lib",
        },
        cwd="/m/src/benchmarks/demo",
        node=node,
        entry={"name": "demo", "definition": "/m/src/benchmarks/demo"},
    )
    launcher = SSHLauncher(system)
    before = launcher.command_for(spec, "tok", "/tmp/envfile")
    assert "cd /m/src/benchmarks/demo" in before  # no layout: the main node's paths
    activate(system, {"n1": layout})
    assert layout_for(system, node) is layout
    assert layout_for(dict(system), node) is None  # another system object: not this run
    command = launcher.command_for(spec, "tok", "/tmp/envfile")
    assert "cd /w/code/r1/tree/m/src/benchmarks/demo &&" in command
    assert (
        "/w/venv/torch/bin/torchrun --nnodes=2 /w/code/r1/tree/m/src/benchmarks/demo/main.py"
        in command
    )
    assert "--data=/w/data/x" in command
    assert "/m/base/../elsewhere" in command  # not under the base once normalised
    assert "mkdir" not in command  # the working directory is the copied folder
    env = launcher.env_for(spec, "tok")
    assert env["VOIRFILE"] == "/w/code/r1/tree/m/src/benchmarks/demo/voirfile.py"
    assert env["PATH"] == "/w/venv/torch/bin:/usr/bin"
    assert env["PYTHONPATH"] == "/w/code/r1/pkg:/w/code/r1/tree/m/src/benchmarks/demo/lib"
    assert json.loads(env["MILABENCH_CONFIG"]) == {
        "definition": "/w/code/r1/tree/m/src/benchmarks/demo",
        "dirs": {"data": "/w/data"},
        "n": 3,
    }


def test_rsync_version_rule():
    """Options of rsync >= 3.2.3 are only given to a new enough pair of ends."""
    assert parse_rsync_version("rsync  version 3.2.7  protocol version 32\n") == (3, 2, 7)
    assert parse_rsync_version("rsync  version v3.1.3  protocol version 31") == (3, 1, 3)
    assert parse_rsync_version("bash: rsync: command not found") is None
    rsync = require("rsync")["rsync"]
    here = subprocess.run([rsync, "--version"], capture_output=True, text=True)
    if here.returncode == 0:
        assert parse_rsync_version(here.stdout) is not None
    settings = SSHSettings({})
    node = {"name": "n", "ip": "10.0.0.2", "user": "u"}
    new = rsync_argv(settings, node, Path("/a"), "/b", version=(3, 2, 3), delete=True)
    old = rsync_argv(settings, node, Path("/a"), "/b", version=(3, 1, 3), delete=True)
    assert "--mkpath" in new and "--mkpath" not in old
    assert "--delete" in new and new[-2:] == ["/a/", "u@10.0.0.2:/b/"]
    stats = "Number of files: 3\nNumber of regular files transferred: 1,204\nTotal file size: 9"
    assert transferred_files(stats) == 1204


SUITE = """
tinyddp-iso:
  definition: bench/tinyddp
  plan: {method: torchrun, nproc: 1}
  num_machines: 2
  max_duration: 150
  weight: 1
  measure: {warmup_min: 0, warmup_max: 0, min: 0, max: 0}
  argv: {--stop: 20, --skip: 2}
  env: {MB_TEST_MARKER: "@marker@"}
"""


@pytest.mark.slow
@pytest.mark.parametrize("worker", ["iso", "bare"])
def test_two_node_run_from_the_copied_code(isolated, worker):
    """`milabench run` of a torchrun benchmark whose worker cannot see the main's files."""
    import yaml

    folder = isolated.main / f"run-{worker}"
    (folder / "bench").mkdir(parents=True)
    shutil.copytree(HERE / "benchmarks" / "tinyddp", folder / "bench" / "tinyddp")
    marker = f"mb{uuid.uuid4().hex[:10]}"
    suite = folder / "suite.yaml"
    suite.write_text(SUITE.replace("@marker@", marker))
    system_file = folder / "system.yaml"
    system = isolated.system(worker)
    # Time for both ranks to leave the process group on their own after rank 0's stop
    # event: cut after the default 2 s, a loaded machine's worker can abort in gloo's
    # teardown (the race is the early stop's, not the copy's).
    system["options"]["run"] = {"early_stop_grace": 30}
    system_file.write_text(yaml.safe_dump({"system": system}))
    base = folder / "base"
    env = dict(os.environ)
    env.update(
        {
            "MILABENCH_FORCE_SSH": "1",
            "MILABENCH_MULTINODE_PORT": str(_free_port("127.0.0.1")),
            "MILABENCH_DASH": "no",
        }
    )
    cmd = [
        sys.executable, "-m", "milabench", "run", "--config", str(suite),
        "--system", str(system_file), "--base", str(base), "--use-current-env",
        "--run-name", "iso",
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    method = "rsync" if worker == "iso" else "sftp"
    assert f"code: {worker} {method} (" in proc.stdout, proc.stdout[:2000]
    print("\n" + next(line for line in proc.stdout.splitlines() if line.startswith("code:")))
    run_dir = base / "runs" / "iso"
    worker_out = (run_dir / f"tinyddp-iso.0.{worker}.stdout").read_text()
    assert "rank 1/2 node-rank 1" in worker_out and f"marker={marker}" in worker_out
    events = list(read_events(run_dir / f"tinyddp-iso.0.{worker}.data"))
    start = next(e for e in events if e["event"] == "start")["data"]
    code_root = Path(system["nodes"][1]["base"]) / "code" / "iso"
    copied = code_root / "tree" / str(folder / "bench" / "tinyddp").lstrip("/")
    assert (copied / "main.py").is_file()
    end = [e for e in events if e["event"] == "end"][-1]["data"]
    assert end["return_code"] == 0 or end.get("early_stop") is True, end
    main_events = list(read_events(run_dir / "tinyddp-iso.0.node0.data"))
    rates = [e["data"]["rate"] for e in main_events if e["event"] == "data" and "rate" in e["data"]]
    assert rates and min(rates) > 0
    assert start  # the worker's start event was recorded


@pytest.mark.slow
def test_push_timings(isolated):
    """Time a first push (new run id) and a repeated push (nothing changed) per method.

    Prints the figures of docs/multinode.md; asserts only what must hold anywhere: a
    repeat copies no file of the benchmark folder (the tool's own files may change under
    the feet of this test on a machine where people edit the tree). One round by default
    (the test suite); ``MB_TIMING_ROUNDS=3`` for the documented figures.
    """
    import statistics

    rounds = max(1, int(os.environ.get("MB_TIMING_ROUNDS", "1")))

    folder = isolated.main / "timings"
    (folder / "bench").mkdir(parents=True)
    shutil.copytree(HERE / "benchmarks" / "tinyddp", folder / "bench" / "tinyddp")
    bench = folder / "bench" / "tinyddp"
    base = folder / "base"
    base.mkdir()
    system = isolated.system("iso", "bare")
    report = []
    for name in ("iso", "bare"):
        node = next(n for n in system["nodes"] if n["name"] == name)
        first, repeat, files = [], [], []
        for k in range(rounds):
            t0 = time.perf_counter()
            layout = _push(system, base, f"t{k}", [bench], node)
            first.append(time.perf_counter() - t0)
            files.append(layout.transferred)
            for _ in range(2):
                inode = os.stat(Path(layout.remote_path(bench)) / "main.py").st_ino
                t0 = time.perf_counter()
                _push(system, base, f"t{k}", [bench], node)
                repeat.append(time.perf_counter() - t0)
                assert os.stat(Path(layout.remote_path(bench)) / "main.py").st_ino == inode
        report.append(
            f"{name} ({layout.method}): first push of {statistics.median(files)} files "
            f"median {statistics.median(first):.2f} s (min {min(first):.2f}, max "
            f"{max(first):.2f}, n={len(first)}); repeat median {statistics.median(repeat):.2f} s "
            f"(min {min(repeat):.2f}, max {max(repeat):.2f}, n={len(repeat)})"
        )
    from milabench.remote.codesync import check_versions

    checks = []
    for _ in range(5 if rounds > 1 else 1):
        layouts = {"iso": _push(system, base, "t0", [bench], system["nodes"][1])}
        t0 = time.perf_counter()
        _, problems = asyncio.run(check_versions(system, base, layouts, {}))
        checks.append(time.perf_counter() - t0)
        assert problems == {} or list(problems) == ["iso"]  # the tree may change meanwhile
    report.append(
        f"version check (main + 1 worker): median {statistics.median(checks):.2f} s "
        f"(min {min(checks):.2f}, max {max(checks):.2f}, n={len(checks)})"
    )
    print("\n" + "\n".join(report))


def test_symlinked_benchmark_folder_is_copied_as_a_folder(isolated):
    """A benchmark folder reached through a symlink arrives as a real folder (both ways)."""
    folder = isolated.main / "linked"
    real, _ = _sources(folder / "real")
    link = folder / "benchmarks-link"
    link.symlink_to(real)
    base = folder / "base"
    base.mkdir()
    system = isolated.system("iso", "bare")
    layouts = asyncio.run(push_code(system, base, "ln", [link], nodes=system["nodes"][1:]))
    for layout in layouts.values():
        copy = Path(layout.remote_path(link))
        assert copy.is_dir() and not copy.is_symlink(), layout.method
        assert (copy / "main.py").read_text() == "print('demo')\n"
