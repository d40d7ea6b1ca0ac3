"""Secrets stay secret: never on a command line, redacted in everything milabench writes.

The remote case uses the loopback sshd of conftest (``MILABENCH_FORCE_SSH=all``: the
single node is reached over SSH); the benchmark (benchmarks/secretbench) sleeps while
the test scans every process's ``/proc/PID/cmdline`` for the marker.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from milabench.events import read_events
from milabench.remote.docker import docker_wrap, write_env_file
from milabench.remote.ssh import WRITE_ENV_FILE, env_script, remote_command

HERE = Path(__file__).parent
SUITE = HERE / "suites" / "secrets.yaml"


def _cmdlines_with(marker: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            raw = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in raw:
            found.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return found


def _environs_with(marker: str) -> int:
    count = 0
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and proc.name != str(os.getpid()):
            try:
                if f"MB_SECRET_TOKEN={marker}".encode() in (proc / "environ").read_bytes():
                    count += 1
            except OSError:
                continue
    return count


def _run_and_scan(cmd: list[str], env: dict, marker: str, timeout: float = 180):
    """Run milabench, scanning every command line while it runs; (proc, leaks, seen)."""
    leaks: list[str] = []
    seen = 0
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            leaks += _cmdlines_with(marker)
            seen += _environs_with(marker)
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc, out, leaks, seen


def _command(
    tmp_path: Path, marker: str, system: Path | None, *extra: str, select: str = "secretbench"
) -> list[str]:
    """The run command; the marker is in a suite file, not on milabench's command line."""
    import yaml

    suite = yaml.safe_load(SUITE.read_text())
    suite["secretbench"]["definition"] = str(HERE / "benchmarks" / "secretbench")
    suite["secretbench"]["env"]["MB_SECRET_TOKEN"] = marker
    suite["secretbench-nodes"]["definition"] = suite["secretbench"]["definition"]
    config = tmp_path / "suite.yaml"
    config.write_text(yaml.safe_dump(suite))
    cmd = [
        sys.executable, "-m", "milabench", "run", "--config", str(config),
        "--base", str(tmp_path / "base"), "--use-current-env", "--select", select,
        "--run-name", "r", *extra,
    ]  # fmt: skip
    if system is not None:
        cmd += ["--system", str(system)]
    return cmd


def _records(run_dir: Path) -> list[dict]:
    out = []
    for path in run_dir.glob("*.data"):
        out += [e["data"] for e in read_events(path) if e["event"] == "data"]
    return out


def _check_secret_run(tmp_path, proc, out, leaks, seen, marker, over_ssh):
    assert proc.returncode == 0, out[-3000:]
    assert leaks == [], leaks
    assert seen > 0, "the benchmark process was seen (the scan ran while it ran)"
    records = [r for r in _records(tmp_path / "base" / "runs" / "r") if "secret_sha" in r]
    assert records, out[-2000:]
    assert {r["secret_sha"] for r in records} == {hashlib.sha256(marker.encode()).hexdigest()}
    assert over_ssh in {r["over_ssh"] for r in records}
    for path in (tmp_path / "base" / "runs").rglob("*"):
        if path.is_file():
            assert marker not in path.read_text(errors="replace"), path


@pytest.mark.slow
def test_local_run_keeps_env_values_out_of_command_lines(tmp_path):
    marker = f"marker-7f3a{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "MILABENCH_DASH": "no"}
    env.pop("MILABENCH_FORCE_SSH", None)
    proc, out, leaks, seen = _run_and_scan(_command(tmp_path, marker, None), env, marker)
    _check_secret_run(tmp_path, proc, out, leaks, seen, marker, over_ssh=False)


@pytest.mark.ssh
@pytest.mark.slow
def test_remote_run_keeps_env_values_out_of_command_lines(ssh_cluster, tmp_path):
    """Two nodes (torchrun): the worker, node 1, is started over SSH."""
    marker = f"marker-7f3a{uuid.uuid4().hex[:12]}"
    system_file = ssh_cluster.system_yaml(tmp_path / "system.yaml")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "MILABENCH_DASH": "no",
        "MILABENCH_FORCE_SSH": "1",
        "MILABENCH_MULTINODE_PORT": str(port),
    }
    cmd = _command(tmp_path, marker, system_file, select="secretbench-nodes")
    proc, out, leaks, seen = _run_and_scan(cmd, env, marker)
    _check_secret_run(tmp_path, proc, out, leaks, seen, marker, over_ssh=True)


@pytest.mark.slow
@pytest.mark.parametrize("dash", ["no", "long"])
def test_printed_secrets_are_redacted_everywhere(tmp_path, dash):
    marker = f"marker-7f3a{uuid.uuid4().hex[:12]}"
    # here the marker is on the benchmark's command line (``--token M``) on purpose
    cmd = _command(tmp_path, "not-the-marker", None, "--override")
    cmd += [f"secretbench.argv.--token={marker}", "--dash", dash]
    env = {k: v for k, v in os.environ.items() if k != "MILABENCH_FORCE_SSH"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert marker not in proc.stdout and marker not in proc.stderr
    run_dir = tmp_path / "base" / "runs" / "r"
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".stdout") for p in files), files
    for path in files:
        assert marker not in path.read_text(errors="replace"), path
    stdout = next(p for p in files if p.name.endswith(".stdout")).read_text()
    for shape in (
        "--token <redacted> --token=<redacted>",
        "--password <redacted> --password=<redacted> --api-key <redacted> --secret=<redacted>",
        "Authorization: Bearer <redacted>",
        "authorization: basic <redacted>",
        "https://<redacted>@host/x",
    ):
        assert shape in stdout, stdout
    report = subprocess.run(
        [sys.executable, "-m", "milabench", "report", "--runs", str(run_dir)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert marker not in report.stdout + report.stderr


# -- command builders ---------------------------------------------------------------------
def test_remote_command_with_env_file_has_no_values():
    env = {"MB_SECRET_TOKEN": "marker-xyz", "MILABENCH_CONFIG": '{"a": "marker-xyz"}'}
    command = remote_command(["python", "main.py"], {}, "/tmp/a dir", env_file="/tmp/tmp.1")
    assert "marker-xyz" not in command
    assert "marker-xyz" in env_script(env)
    with pytest.raises(ValueError):
        env_script({"BAD NAME": "1"})


def test_env_file_written_by_the_remote_snippet_is_private_and_sourced(tmp_path):
    """WRITE_ENV_FILE + env_script + remote_command, run by a local ``sh``."""
    tricky = "marker 'q' \"dq\" $HOME `no`\nline2"
    env = {"MB_SECRET_TOKEN": tricky, "TMPDIR": str(tmp_path)}
    written = subprocess.run(
        ["sh", "-c", WRITE_ENV_FILE], input=env_script(env), text=True,
        capture_output=True, check=True, env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    path = Path(written.stdout.strip())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    probe = [sys.executable, "-c", "import os; print(repr(os.environ['MB_SECRET_TOKEN']))"]
    command = remote_command(probe, {}, None, new_group=False, env_file=str(path))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == repr(tricky)
    assert not path.exists(), "the env file is removed once sourced"


def test_docker_argv_has_names_only_and_env_file_is_0600(tmp_path):
    env = {"MB_SECRET_TOKEN": "marker-xyz", "DATA_FD": "1"}
    argv = docker_wrap(["python", "main.py"], env, image="img", base="/b")
    assert not any("marker-xyz" in a for a in argv)
    assert ["-e", "MB_SECRET_TOKEN"] == argv[argv.index("MB_SECRET_TOKEN") - 1 :][:2]
    path = write_env_file(tmp_path / "env", env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "MB_SECRET_TOKEN=marker-xyz\nDATA_FD=1\n"
    with pytest.raises(FileExistsError):
        write_env_file(path, env)  # never reuses (or follows) an existing file
    with pytest.raises(ValueError):
        write_env_file(tmp_path / "e2", {"A": "two\nlines"})
