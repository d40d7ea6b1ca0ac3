"""Two real OpenSSH servers on 127.0.0.1 and 127.0.0.2 (distinct high ports).

Keys (host and client) and known_hosts are generated in a temporary folder; the servers
run ``sshd -D -f <cfg>`` as children of the test session and are killed at teardown.
OpenSSH and rsync are installed when missing (tests/systemtools.py); the ssh tests are
skipped with the reason when that fails (failed, under CI).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sshnodes import ensure_sshd, free_port, keygen, setenv_line
from systemtools import require, require_root, unavailable

# sshd discovery, install, free ports and keys are shared with the fleet tests
_ensure_sshd, _free_port, _keygen = ensure_sshd, free_port, keygen


@dataclass
class SSHCluster:
    """What the tests need to build a system file for the two loopback "nodes"."""

    tmp: Path
    client_key: Path
    known_hosts: Path
    nodes: list[dict]
    procs: list[subprocess.Popen] = field(default_factory=list)
    host_pub: str = ""

    def system(self, **extra) -> dict:
        system = {
            "arch": "cpu",
            "sshkey": str(self.client_key),
            "nodes": [dict(n) for n in self.nodes],
            "options": {"ssh": {"known_hosts": str(self.known_hosts)}},
        }
        system.update(extra)
        return system

    def system_yaml(self, path: Path, **extra) -> Path:
        import yaml

        path.write_text(yaml.safe_dump({"system": self.system(**extra)}))
        return path


def _wait_listening(host: str, port: int, proc: subprocess.Popen, timeout=10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd on {host}:{port} exited with {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd on {host}:{port} did not listen")


@pytest.fixture(scope="session")
def ssh_cluster(tmp_path_factory):
    sshd = _ensure_sshd()
    require("rsync")  # full nodes; the SFTP fallback is tested on nodes without it
    require_root("the sshd fixture (it logs in as the current user, root)")
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege-separation directory
    tmp = tmp_path_factory.mktemp("sshd")
    host_key = tmp / "host_ed25519"
    client_key = tmp / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    authorized = tmp / "authorized_keys"
    authorized.write_text(client_key.with_suffix(".pub").read_text())
    authorized.chmod(0o600)
    host_pub = " ".join(host_key.with_suffix(".pub").read_text().split()[:2])
    user = os.environ.get("USER") or "root"
    nodes = []
    lines = []
    procs = []
    for i, host in enumerate(["127.0.0.1", "127.0.0.2"]):
        port = _free_port(host)
        cfg = tmp / f"sshd_{i}.conf"
        cfg.write_text(
            "\n".join(
                [
                    f"Port {port}",
                    f"ListenAddress {host}",
                    f"HostKey {host_key}",
                    f"PidFile {tmp / f'sshd_{i}.pid'}",
                    "UsePAM no",
                    "PermitRootLogin yes",
                    "StrictModes no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes",
                    f"AuthorizedKeysFile {authorized}",
                    "MaxSessions 100",
                    "Subsystem sftp internal-sftp",
                    "MaxStartups 100",
                    "LogLevel ERROR",
                    setenv_line({}),
                    "",
                ]
            )
        )
        log = open(tmp / f"sshd_{i}.log", "w")
        proc = subprocess.Popen(
            [sshd, "-D", "-e", "-f", str(cfg)], stdout=log, stderr=subprocess.STDOUT
        )
        procs.append(proc)
        try:
            _wait_listening(host, port, proc)
        except RuntimeError as err:
            for p in procs:
                p.kill()
            unavailable(f"sshd could not start: {err}: {(tmp / f'sshd_{i}.log').read_text()}")
        nodes.append(
            {
                "name": f"node{i}",
                "ip": host,
                "port": port,
                "user": user,
                "main": i == 0,
            }
        )
        lines.append(f"[{host}]:{port} {host_pub}")
    known_hosts = tmp / "known_hosts"
    known_hosts.write_text("\n".join(lines) + "\n")
    cluster = SSHCluster(tmp, client_key, known_hosts, nodes, procs, host_pub)
    try:
        yield cluster
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def force_ssh(monkeypatch):
    """Reach every node over SSH, main included (both "nodes" are this machine)."""
    monkeypatch.setenv("MILABENCH_FORCE_SSH", "all")


PYTHON = sys.executable


@pytest.fixture
def tarpit():
    """A node that accepts TCP but never speaks SSH (a hung machine): (ip, port)."""
    sock = socket.socket()
    sock.bind(("127.0.0.4", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()
    finally:
        sock.close()
