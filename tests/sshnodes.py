"""Loopback "nodes" for tests: real OpenSSH servers on 127.0.0.x, each optionally changed
the way a real node of a rack can differ.

* ``cpu_quota``: the node's sshd is put in a new cgroup v1 ``cpu`` group with a CFS quota
  (``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``, ``cpu_period``) *before* it accepts a
  connection, by the
  shell that then becomes sshd (``echo $$ > cgroup.procs; exec sshd``): every session
  and everything it starts inherits the group, so the whole node is throttled;
* ``without_rsync``: the sessions get a PATH of links to every usual command except
  ``rsync`` (sshd's ``SetEnv``), as on a node without the package;
* ``hide``: folders of the main node covered by an empty tmpfs in a private mount
  namespace (``unshare --mount``), so that a node that still used a main-node path would
  find nothing there (no shared filesystem).

Used by tests/fleet (and usable by any test that needs more nodes than the two of
tests/remote/conftest.py). Keys and known_hosts are generated per `SSHNodes`; ``close``
kills every node, its sessions and its cgroup members, and removes the cgroups.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from cpuclass import CPU_ROOT as CGROUP_CPU
from cpuclass import own_group
from systemtools import require

# Run by the node's launcher process, which then becomes sshd (same pid): join the cgroup
# ($1, may be empty), cover the hidden folders ($4...), exec sshd -D with the config ($2).
_START = (
    "procs=$1; cfg=$2; sshd=$3; shift 3; "
    'if [ -n "$procs" ]; then echo $$ > "$procs" || exit 96; fi; '
    'for d in "$@"; do mount -t tmpfs -o size=1m,mode=0755 milabench-hidden "$d" || exit 97; done; '
    'exec "$sshd" -D -e -f "$cfg"'
)


def ensure_sshd() -> str:
    """sshd's path, with the OpenSSH server, client and ssh-keygen installed if missing
    (tests/systemtools.py: skipped, or failed under CI, when they cannot be)."""
    return require("sshd", "ssh", "ssh-keygen")["sshd"]


def folders_to_hide(folder: str, keep: str = sys.prefix) -> list[str]:
    """Folders to cover so that ``folder`` looks absent on a node, except the way down to
    ``keep``: the test's Python environment, which a real node has as its own (a
    ``.venv`` inside the clone must stay visible, the clone's code must not)."""
    root, kept = Path(folder).resolve(), Path(keep).resolve()
    if kept != root and root not in kept.parents:
        return [str(root)]
    hidden = []
    for child in sorted(root.iterdir()):
        if child.is_symlink() or not child.is_dir() or child == kept:
            continue
        hidden += folders_to_hide(str(child), keep) if child in kept.parents else [str(child)]
    return hidden


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def closed_port(host: str) -> int:
    """A port on ``host`` that nobody listens on (bound then released)."""
    return free_port(host)


def keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "milabench-test", "-f", str(path)],
        check=True,
    )


def path_without(folder: Path, missing: tuple[str, ...] = ("rsync",)) -> str:
    """A folder of links to every command of the usual PATH except ``missing``."""
    folder.mkdir(parents=True, exist_ok=True)
    for bindir in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if not os.path.isdir(bindir):
            continue
        for name in os.listdir(bindir):
            link = folder / name
            if name in missing or link.exists() or link.is_symlink():
                continue
            link.symlink_to(os.path.join(bindir, name))
    return str(folder)


# How this machine reaches package indexes (CA bundles, proxies, index mirrors). A real
# node has them in its login environment (/etc/environment, profile); sshd gives the test
# nodes' sessions the values of the test process, so that an install on a node reaches
# the same indexes as one on the main node.
NETWORK_VARIABLES = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_DEFAULT_TIMEOUT",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_NATIVE_TLS",
    "UV_CACHE_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)


# Every node's sessions get SHLVL=1: bash started by sshd sources the login user's
# ~/.bashrc only at shell level 1, and this makes it 2. A development machine's root
# dotfiles (pyenv init: 138 processes, about 95 ms of CPU) would otherwise run for every
# remote command, about 600 times a session; what a node needs is set by the test.
SESSION_SETTINGS = {"SHLVL": "1"}


def setenv_line(variables: dict[str, str]) -> str:
    """sshd's ``SetEnv`` line for ``variables`` plus `SESSION_SETTINGS` (sshd takes the
    first SetEnv line only: every variable goes on one line)."""
    merged = {**SESSION_SETTINGS, **variables}
    return "SetEnv " + " ".join(f'{k}="{v}"' for k, v in merged.items())


def network_settings() -> dict[str, str]:
    """The `NETWORK_VARIABLES` set here (values without quotes or newlines only)."""
    found = {}
    for name in NETWORK_VARIABLES:
        value = os.environ.get(name)
        if value and not any(c in value for c in '"\n\\'):
            found[name] = value
    return found


def _quota_parent() -> Path:
    """Where the nodes' quota groups are made: under the creator's own ``cpu`` group, so
    that a node made by an ordinary test of a parallel session takes the session's idle
    CPU group with it (tests/cpuclass.py)."""
    return own_group() or CGROUP_CPU


def cgroup_v1_cpu_problem() -> str | None:
    """None when a cgroup v1 ``cpu`` group can be created here with a quota, else why not."""
    parent = _quota_parent()
    if not (parent / "cgroup.procs").is_file():
        return f"no cgroup v1 cpu controller at {parent}"
    probe = parent / f"milabench-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as err:
        return f"cannot create a cgroup under {parent}: {err.strerror or err}"
    try:
        (probe / "cpu.cfs_quota_us").write_text("50000\n")
    except OSError as err:
        return f"cannot set cpu.cfs_quota_us: {err.strerror or err}"
    finally:
        probe.rmdir()
    return None


@dataclass
class CpuQuota:
    """A cgroup v1 ``cpu`` group limited to ``quota_us`` of CPU time per ``period_us``."""

    path: Path

    @classmethod
    def create(cls, quota_us: int, period_us: int = 100_000) -> CpuQuota:
        path = _quota_parent() / f"milabench-test-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        (path / "cpu.cfs_period_us").write_text(f"{period_us}\n")
        (path / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
        return cls(path)

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def set_quota(self, quota_us: int) -> None:
        """``-1`` lifts the limit."""
        (self.path / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")

    def quota(self) -> int:
        """The CFS quota now (``-1``: none)."""
        return int((self.path / "cpu.cfs_quota_us").read_text())

    def members(self) -> list[int]:
        try:
            return [int(x) for x in self.procs_file.read_text().split()]
        except OSError:
            return []

    def throttled_periods(self) -> int:
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "nr_throttled":
                return int(value)
        return 0

    def remove(self) -> None:
        """SIGKILL every member, then remove the group (it must be empty)."""
        deadline = time.monotonic() + 10
        while self.path.exists():
            for pid in self.members():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.path.rmdir()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@dataclass
class SSHNode:
    """One running sshd "node"."""

    name: str
    ip: str
    port: int
    user: str
    proc: subprocess.Popen
    log: Path
    cgroup: CpuQuota | None = None
    extra: dict = field(default_factory=dict)

    def system_node(self, **extra) -> dict:
        """The node as a system file lists it, reached over SSH even on loopback."""
        node = {"name": self.name, "ip": self.ip, "port": self.port, "user": self.user}
        node.update({"local": False, **self.extra, **extra})
        return node

    def sessions(self) -> list[psutil.Process]:
        """Every process below the node's sshd (its sessions and what they started)."""
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    def kill_everything(self) -> None:
        """The node dies: sshd, every session and every process they started, at once."""
        procs = self.sessions()
        if self.cgroup is not None:
            procs += [psutil.Process(p) for p in self.cgroup.members() if psutil.pid_exists(p)]
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc.poll() is None


class SSHNodes:
    """Keys, known_hosts and the sshd nodes started with them (``close`` ends them all)."""

    def __init__(self, tmp: Path, sshd: str) -> None:
        self.tmp = tmp
        self.sshd = sshd
        self.host_key = tmp / "host_ed25519"
        self.client_key = tmp / "client_ed25519"
        keygen(self.host_key)
        keygen(self.client_key)
        self.authorized = tmp / "authorized_keys"
        self.authorized.write_text(self.client_key.with_suffix(".pub").read_text())
        self.authorized.chmod(0o600)
        self.host_pub = " ".join(self.host_key.with_suffix(".pub").read_text().split()[:2])
        self.known_hosts = tmp / "known_hosts"
        self.known_hosts.write_text("")
        self.user = os.environ.get("USER") or "root"
        self.nodes: list[SSHNode] = []
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation

    def start(
        self,
        name: str,
        ip: str,
        *,
        cpu_quota: int | None = None,
        cpu_period: int = 100_000,
        without_rsync: bool = False,
        hide: tuple[str, ...] = (),
        network: bool = True,
        setenv: dict[str, str] | None = None,
    ) -> SSHNode:
        """``network=False``: the sessions get none of this process's `NETWORK_VARIABLES`
        (a node configured only by its files, as an SSH login without a profile is);
        ``setenv``: variables every session of this node gets (sshd's ``SetEnv``)."""
        port = free_port(ip)
        cfg = self.tmp / f"sshd_{name}.conf"
        settings = [
            f"Port {port}",
            f"ListenAddress {ip}",
            f"HostKey {self.host_key}",
            f"PidFile {self.tmp / f'sshd_{name}.pid'}",
            "UsePAM no",
            "PermitRootLogin yes",
            "StrictModes no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            f"AuthorizedKeysFile {self.authorized}",
            "MaxSessions 100",
            "MaxStartups 100",
            "Subsystem sftp internal-sftp",
            "LogLevel ERROR",
        ]
        setenv = {**(network_settings() if network else {}), **(setenv or {})}
        if without_rsync:
            setenv["PATH"] = path_without(self.tmp / f"path_{name}")
        settings.append(setenv_line(setenv))
        cfg.write_text("\n".join(settings) + "\n")
        cgroup = CpuQuota.create(cpu_quota, cpu_period) if cpu_quota else None
        argv = ["sh", "-c", _START, "milabench-test-node"]
        argv += [str(cgroup.procs_file) if cgroup else "", str(cfg), self.sshd, *hide]
        if hide:
            argv = ["unshare", "--mount", "--propagation", "private", *argv]
        log = self.tmp / f"sshd_{name}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        node = SSHNode(name, ip, port, self.user, proc, log, cgroup)
        self.nodes.append(node)
        self._wait_listening(node)
        with open(self.known_hosts, "a") as f:
            f.write(f"[{ip}]:{port} {self.host_pub}\n")
        return node

    def _wait_listening(self, node: SSHNode, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.proc.poll() is not None:
                raise RuntimeError(
                    f"sshd {node.name} exited with {node.proc.returncode}: "
                    f"{node.log.read_text()[-500:]}"
                )
            try:
                with socket.create_connection((node.ip, node.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd {node.name} on {node.ip}:{node.port} did not listen")

    def system(self, nodes: list[dict], **extra) -> dict:
        system = {
            "arch": "cpu",
            "sshkey": str(self.client_key),
            "nodes": nodes,
            "options": {"ssh": {"known_hosts": str(self.known_hosts)}},
        }
        system.update(extra)
        return system

    def system_yaml(self, path: Path, nodes: list[dict], **extra) -> Path:
        import yaml

        path.write_text(yaml.safe_dump({"system": self.system(nodes, **extra)}))
        return path

    def close(self) -> None:
        for node in self.nodes:
            if node.alive():
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            try:
                node.proc.wait(10)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait()
            for proc in node.sessions():
                try:
                    proc.kill()
                except psutil.Error:
                    pass
            if node.cgroup is not None:
                node.cgroup.remove()


def processes_with_env(entry_prefix: str) -> list[psutil.Process]:
    """Processes whose environment has a variable starting with ``entry_prefix``
    (``NAME=`` or ``NAME=value``)."""
    needle = entry_prefix.encode()
    found = []
    me = os.getpid()
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                entries = f.read().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(needle) for e in entries):
            try:
                found.append(psutil.Process(pid))
            except psutil.Error:
                pass
    return found
