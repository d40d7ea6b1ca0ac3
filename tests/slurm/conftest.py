"""A real one-node Slurm cluster on this machine: munged, slurmctld and slurmd.

Debian's ``slurm-wlm`` and ``munge`` are installed with apt-get when a tool is missing;
the tests skip with apt's reason when that fails. Everything the daemons write lives in
one temporary folder: a fresh munge key, the munge socket, slurm.conf (one node, this
host under its ``hostname -s`` name, ``os.cpu_count()`` CPUs, partition ``debug``), the
controller's state, slurmd's spool, pid files and logs. Nothing under /etc, /run or
/var is used, so the machine's own Slurm or munge (if any) is neither read nor touched.
Both Slurm ports are free ports picked at start, so parallel sessions do not collide.

The daemons run in the foreground (``munged -F``, ``slurmctld -D``, ``slurmd -D``) as
children of the test session, each in its own process group, with ``SLURM_CONF`` set.
Every process of the cluster, jobs included, carries ``MILABENCH_SLURM_TEST=<token>`` in
its environment (slurmstepd inherits slurmd's, a job gets its submitter's): teardown
cancels the jobs, stops the daemons, then looks for any process still carrying the token,
kills it and fails if there was one. Every wait is bounded; a failure message carries the
tail of every daemon's log.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from systemtools import require, require_root

MARK_VAR = "MILABENCH_SLURM_TEST"
JOB_MARK_VAR = "MILABENCH_SLURM_JOB"
TOOLS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo")
# Job states after which the job never runs again (squeue(1), "JOB STATE CODES").
FINAL_STATES = {
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT",
}  # fmt: skip
START_TIMEOUT = 120.0  # munged answering, then the node idle in sinfo
STOP_GRACE = 20.0  # SIGTERM to SIGKILL, per daemon


def _free_ports(count: int) -> list[int]:
    """Ports nobody listens on now (kept bound together so that they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("0.0.0.0", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _clean_env() -> dict[str, str]:
    """This process's environment without anything that would choose another cluster or
    change what milabench does (a developer's MILABENCH_*, an outer Slurm job's SLURM_*)."""
    drop = ("MILABENCH_", "SLURM_", "SBATCH_", "SALLOC_", "SRUN_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"({path.name}: {exc.strerror})"
    return "\n".join(text[-lines:]) or "(empty)"


def marked_pids(var: str, token: str) -> list[int]:
    """Living processes (zombies excluded) with ``var=token`` in their environment."""
    needle = f"{var}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def _describe_pids(pids: list[int]) -> str:
    out = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmd = "?"
        out.append(f"{pid} {cmd.strip()}")
    return "; ".join(out)


@dataclass
class Daemon:
    name: str
    argv: list[str]
    console: Path  # the daemon's stdout + stderr
    logfile: Path | None  # the log file its configuration names, if any
    proc: subprocess.Popen | None = None

    def tail(self, lines: int = 30) -> str:
        parts = [f"--- {self.name} ({' '.join(self.argv)})"]
        if self.proc is not None and self.proc.poll() is not None:
            parts.append(f"exited with {self.proc.returncode}")
        parts.append(_tail(self.console, lines))
        if self.logfile is not None and self.logfile.exists():  # munged -F uses stderr
            parts += [f"--- {self.logfile.name}", _tail(self.logfile, lines)]
        return "\n".join(parts)


@dataclass
class JobResult:
    job_id: str
    state: str
    exit_code: str  # "<code>:<signal>", as scontrol prints it
    info: dict[str, str]
    output: Path | None

    @property
    def code(self) -> int:
        return int(self.exit_code.split(":", 1)[0])


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    host: str
    token: str
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """Environment of the daemons and of the Slurm commands the tests run."""
        return {**_clean_env(), "SLURM_CONF": str(self.conf), MARK_VAR: self.token}

    def logs(self, lines: int = 30) -> str:
        return "\n".join(d.tail(lines) for d in self.daemons)

    def command(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv),
            env=self.env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
        )

    def job_info(self, job_id: str) -> dict[str, str]:
        proc = self.command("scontrol", "show", "job", "-o", job_id)
        if proc.returncode != 0:
            return {}
        return dict(re.findall(r"(\w[\w:/]*)=(\S*)", proc.stdout))

    def submit(
        self,
        script: Path,
        *args: str,
        cwd: Path,
        env: dict[str, str] | None = None,
    ) -> str:
        """``sbatch --parsable script args`` in `cwd` with the cluster's environment plus
        `env` (the job inherits it); the job id."""
        proc = subprocess.run(
            ["sbatch", "--parsable", str(script), *args],
            env={**self.env, "MILABENCH_DASH": "no", **(env or {})},
            cwd=cwd,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        if proc.returncode != 0:
            pytest.fail(f"sbatch {script} failed ({proc.returncode}): {proc.stderr}\n{self.logs()}")
        return proc.stdout.strip().split(";", 1)[0]

    def wait(self, job_id: str, timeout: float) -> JobResult:
        """Poll ``scontrol show job`` until the job is over; past `timeout` seconds the job
        is cancelled and the test fails with the job's output and the daemons' logs."""
        deadline = time.monotonic() + timeout
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            info = self.job_info(job_id) or info
            if info.get("JobState") in FINAL_STATES:
                out = Path(info["StdOut"]) if info.get("StdOut") else None
                return JobResult(job_id, info["JobState"], info.get("ExitCode", "?"), info, out)
            time.sleep(1.0)
        self.command("scancel", job_id)
        out = Path(info["StdOut"]) if info.get("StdOut") else None
        pytest.fail(
            f"job {job_id} not over after {timeout:.0f} s (state {info.get('JobState')}); "
            f"cancelled.\n--- job output\n{_tail(out) if out else '(none)'}\n{self.logs()}"
        )

    def describe(self, job: JobResult) -> str:
        """A failure message: the job's facts, its output, the daemons' logs."""
        output = _tail(job.output, 60) if job.output else "(no output file)"
        return (
            f"job {job.job_id}: {job.state}, exit code {job.exit_code}, reason "
            f"{job.info.get('Reason')}\n--- job output\n{output}\n{self.logs()}"
        )

    def wait_job_processes_gone(self, job_token: str, timeout: float = 60) -> list[int]:
        """The job's processes still alive after `timeout` seconds (none, normally)."""
        deadline = time.monotonic() + timeout
        while (pids := marked_pids(JOB_MARK_VAR, job_token)) and time.monotonic() < deadline:
            time.sleep(0.5)
        return pids


def _write_conf(root: Path, host: str, ports: list[int]) -> Path:
    (root / "plugstack.conf").write_text("")  # not /etc/slurm/plugstack.conf
    conf = root / "slurm.conf"
    conf.write_text(
        f"""# one-node test cluster of tests/slurm/conftest.py
ClusterName=milabench-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/run/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={root}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MailProg=/bin/true
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""
    )
    return conf


def _start(daemon: Daemon, env: dict[str, str]) -> None:
    with open(daemon.console, "wb") as console:
        daemon.proc = subprocess.Popen(
            daemon.argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(daemon: Daemon) -> None:
    """SIGTERM to the daemon's process group, SIGKILL after the grace; reaped."""
    proc = daemon.proc
    if proc is None:
        return
    for sig, grace in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    try:  # anything left in its group (slurmctld's slurmscriptd)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_until(what: str, check, cluster: SlurmCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in cluster.daemons:
            if d.proc is not None and d.proc.poll() is not None:
                raise RuntimeError(f"{d.name} exited with {d.proc.returncode} before {what}")
        if check():
            return
        time.sleep(0.5)
    raise RuntimeError(f"no {what} after {timeout:.0f} s")


def _start_cluster(cluster: SlurmCluster) -> None:
    root, env = cluster.root, cluster.env
    munge_socket = root / "run" / "munge.socket"
    munged = Daemon(
        "munged",
        [
            "munged",
            "-F",
            f"--key-file={root}/key/munge.key",
            f"--socket={munge_socket}",
            f"--pid-file={root}/run/munged.pid",
            f"--log-file={root}/log/munged.log",
            f"--seed-file={root}/key/munged.seed",
        ],  # fmt: skip
        root / "log" / "munged.console",
        root / "log" / "munged.log",
    )
    cluster.daemons.append(munged)
    _start(munged, env)

    def munge_answers() -> bool:
        proc = subprocess.run(
            ["munge", "-n", "-S", str(munge_socket)], capture_output=True, timeout=10
        )
        return proc.returncode == 0

    _wait_until("answer from munged", munge_answers, cluster, START_TIMEOUT)
    for name in ("slurmctld", "slurmd"):
        daemon = Daemon(
            name, [name, "-D"], root / "log" / f"{name}.console", root / "log" / f"{name}.log"
        )
        cluster.daemons.append(daemon)
        _start(daemon, env)

    def node_idle() -> bool:
        proc = cluster.command("sinfo", "-h", "-n", cluster.host, "-o", "%t", timeout=30)
        return proc.returncode == 0 and proc.stdout.strip() == "idle"

    _wait_until(f"idle node {cluster.host} in sinfo", node_idle, cluster, START_TIMEOUT)


def _teardown(cluster: SlurmCluster) -> list[str]:
    """Cancel every job, stop the daemons, kill and report anything left behind."""
    problems = []
    alive = [d for d in cluster.daemons if d.proc is not None and d.proc.poll() is None]
    if any(d.name == "slurmctld" for d in alive):
        cluster.command("scancel", "--full", "--quiet", "--user", str(os.getuid()), timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            queue = cluster.command("squeue", "-h", "-o", "%i", timeout=30)
            if queue.returncode != 0 or not queue.stdout.strip():
                break
            time.sleep(0.5)
        else:
            problems.append("jobs still queued 60 s after scancel")
    for daemon in reversed(cluster.daemons):
        _stop(daemon)
    deadline = time.monotonic() + 30
    while (left := marked_pids(MARK_VAR, cluster.token)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        problems.append(f"processes left behind: {_describe_pids(left)}")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return problems


@pytest.fixture(scope="session")
def slurm_cluster():
    require_root("the Slurm test cluster (its daemons run as root)")
    require(*TOOLS)
    host = (
        subprocess.run(
            ["hostname", "-s"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        or socket.gethostname().split(".")[0]
    )
    root = Path(tempfile.mkdtemp(prefix="milabench-slurm-"))
    root.chmod(0o755)  # munged wants every folder above its socket searchable by all
    cluster = SlurmCluster(root, root / "slurm.conf", host, uuid.uuid4().hex)
    problems: list[str] = []
    logs = ""
    try:
        for name, mode in (("key", 0o700), ("run", 0o755), ("state", 0o700),
                           ("spool", 0o755), ("log", 0o755)):  # fmt: skip
            (root / name).mkdir(mode=mode)
        key = root / "key" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        _write_conf(root, host, _free_ports(2))
        try:
            _start_cluster(cluster)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            pytest.fail(f"the Slurm test cluster did not start: {exc}\n{cluster.logs()}")
        yield cluster
    finally:
        problems = _teardown(cluster)
        if problems:
            logs = cluster.logs()
        shutil.rmtree(root, ignore_errors=True)
    if problems:
        pytest.fail(f"Slurm cluster teardown: {'; '.join(problems)}\n{logs}")
