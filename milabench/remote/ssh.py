"""SSH connections (one per node, reused, asyncssh) and the remote command line.

Host keys are verified against ``~/.ssh/known_hosts`` by default. Options (see
`milabench.config.topology.get_option`): ``ssh.known_hosts: PATH`` (verify against that
file instead), ``ssh.strict_host_key_checking: false`` (accept any host key: explicit,
never implied), ``ssh.connect_timeout: 10`` (seconds before an unreachable node fails).
The client key is ``system.sshkey`` (``~`` expanded); without it asyncssh's default keys
and agent are used. Errors become one sentence naming the node. Why asyncssh, and the
command line sent: docs/multinode.md "Running a multi-node benchmark".
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from milabench.config.options import checked_number
from milabench.config.topology import (
    DEFAULT_CONNECT_TIMEOUT,
    get_option,
    node_label,
    node_port,
)
from milabench.errors import NodeError

PGID_PREFIX = "@milabench-remote-pgid "


def quote_env(env: Mapping[str, str]) -> list[str]:
    """``K=V`` words for the remote shell, every value quoted (the name is checked)."""
    words = []
    for key, value in env.items():
        if (
            not key
            or not (key[0].isalpha() or key[0] == "_")
            or not all(c.isalnum() or c == "_" for c in key)
        ):
            raise ValueError(f"invalid environment variable name: {key!r}")
        words.append(f"{key}={shlex.quote(str(value))}")
    return words


# Run on the node with the environment script on stdin: a new 0600 file (mktemp creates
# it so, umask 077 covers a mktemp that would not), whose path is printed back.
WRITE_ENV_FILE = 'umask 077 && f=$(mktemp) && cat > "$f" && echo "$f"'


def env_script(env: Mapping[str, str]) -> str:
    """``K='V'`` lines for the remote shell to source (names checked, values quoted).

    This text travels on the SSH channel's standard input (`WRITE_ENV_FILE`), never on a
    command line: values (``MILABENCH_CONFIG``, tokens of ``env:``) must not show in
    ``ps`` on the node.
    """
    return "".join(word + "\n" for word in quote_env(env))


def remote_command(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    *,
    new_group: bool = True,
    env_file: str | None = None,
) -> str:
    """The one string sent to the remote shell for ``argv`` with ``env`` in ``cwd``.

    Every piece coming from data is `shlex.quote`d. With ``new_group`` the command runs
    as the leader of a new session (``setsid -w``: the ssh channel still gets its exit
    status), and first prints ``@milabench-remote-pgid <pgid>`` on standard output so that
    the launcher can signal the whole remote group later; the launcher strips that line.

    With ``env_file`` (a file written by `WRITE_ENV_FILE` from `env_script`), the shell
    first sources it with every variable exported (``set -a``) and removes it, so that the
    values reach the process through its environment, not its command line; ``env`` should
    then hold nothing secret (values given there are on the command line).
    """
    parts: list[str] = []
    if env_file:
        path = shlex.quote(str(env_file))
        parts += ["set", "-a", "&&", ".", path, "&&", "set", "+a", "&&"]
        parts += ["rm", "-f", "--", path, "&&"]
    if cwd:
        parts += ["cd", shlex.quote(str(cwd)), "&&"]
    inner = ["env", *quote_env(env or {}), *(shlex.quote(str(a)) for a in argv)]
    if not argv:
        raise ValueError("empty argv")
    if new_group:
        script = f'echo "{PGID_PREFIX}$$"; exec "$@"'
        parts += ["exec", "setsid", "-w", "sh", "-c", shlex.quote(script), "milabench-remote"]
    else:
        parts += ["exec"]
    parts += inner
    return " ".join(parts)


class SSHSettings:
    """Connection settings shared by every node of a system."""

    def __init__(self, system: dict | None) -> None:
        system = system or {}
        self.connect_timeout = float(
            checked_number(system, "ssh.connect_timeout", DEFAULT_CONNECT_TIMEOUT)
        )
        self.strict = bool(get_option(system, "ssh.strict_host_key_checking", True))
        known = get_option(system, "ssh.known_hosts", None)
        self.known_hosts: str | None = str(Path(str(known)).expanduser()) if known else None
        key = system.get("sshkey")
        self.key: str | None = str(Path(str(key)).expanduser()) if key else None

    def connect_kwargs(self, node: dict) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "host": str(node["ip"]),
            "port": node_port(node),
            "username": str(node.get("user")) if node.get("user") else (),
            "connect_timeout": self.connect_timeout,
            "login_timeout": max(self.connect_timeout, 5.0),
            # a node that dies mid-copy (SFTP) or mid-run is noticed within a minute
            "keepalive_interval": 15,
            "keepalive_count_max": 4,
        }
        if not self.strict:
            kwargs["known_hosts"] = None
        elif self.known_hosts:
            kwargs["known_hosts"] = self.known_hosts
        if self.key:
            kwargs["client_keys"] = [self.key]
            kwargs["agent_path"] = None
        return kwargs


def _explain(node: dict, settings: SSHSettings, err: BaseException) -> NodeError:
    import asyncssh

    label = node_label(node)
    if isinstance(err, asyncssh.HostKeyNotVerifiable):
        where = settings.known_hosts or "~/.ssh/known_hosts"
        return NodeError(
            f"node {label}: host key not verified against {where} ({err.reason}); add the "
            "key there, or set ssh.known_hosts / ssh.strict_host_key_checking: false"
        )
    if isinstance(err, asyncssh.PermissionDenied):
        return NodeError(f"node {label}: SSH authentication refused (key {settings.key})")
    if isinstance(err, asyncio.TimeoutError | TimeoutError):
        return NodeError(
            f"node {label}: no answer within {settings.connect_timeout:g} s (ssh.connect_timeout)"
        )
    if isinstance(err, ConnectionRefusedError):
        return NodeError(f"node {label}: connection refused")
    if isinstance(err, OSError):
        return NodeError(f"node {label}: cannot connect ({err.strerror or err})")
    return NodeError(f"node {label}: SSH failed ({type(err).__name__}: {err})")


class ConnectionPool:
    """One SSH connection per node, opened on first use and reused for the whole run.

    Connections belong to the event loop that opened them; if the pool is used from a
    new loop (a later ``asyncio.run``), stale connections are dropped and reopened.
    """

    def __init__(self, system: dict | None) -> None:
        self.system = system or {}
        self.settings = SSHSettings(system)
        self._conns: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._refused: dict[str, NodeError] = {}

    def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._conns.clear()
            self._locks.clear()
            self._loop = loop

    async def connect(self, node: dict):
        """The open connection to ``node`` (NodeError naming it on failure)."""
        import asyncssh

        self._check_loop()
        name = str(node.get("name"))
        if name in self._refused:
            raise NodeError(str(self._refused[name]))
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            conn = self._conns.get(name)
            if conn is not None and not conn.is_closed():
                return conn
            kwargs = self.settings.connect_kwargs(node)
            # connect_timeout covers TCP + key exchange; the outer wait_for also bounds
            # authentication so that a half-open node cannot hang the run.
            bound = self.settings.connect_timeout + 2.0
            try:
                conn = await asyncio.wait_for(asyncssh.connect(**kwargs), bound)
            except (TimeoutError, OSError, asyncssh.Error) as err:
                raise _explain(node, self.settings, err) from err
            self._conns[name] = conn
            return conn

    def refuse(self, node: dict, error: NodeError) -> None:
        """Make every later `connect` to ``node`` fail at once with ``error``.

        For a node found unusable before a run (unreachable, code not copied, versions
        differing from the main node's): every rank that needs it then fails at once with
        that reason, instead of each waiting for a connection or a rendezvous. Lasts until
        `close` (the end of the run: the run's launcher closes its pool).
        """
        self._refused[str(node.get("name"))] = error

    async def run(
        self, node: dict, argv: Sequence[str], *, timeout: float | None = 60.0, check=False
    ):
        """Run a short command to completion (probes, kills); returns asyncssh's result."""
        conn = await self.connect(node)
        command = " ".join(shlex.quote(str(a)) for a in argv)
        try:
            result = await asyncio.wait_for(conn.run(command, check=False), timeout)
        except TimeoutError as err:
            raise NodeError(
                f"node {node_label(node)}: `{command}` did not finish in {timeout:g} s"
            ) from err
        if check and result.exit_status != 0:
            raise NodeError(
                f"node {node_label(node)}: `{command}` failed "
                f"(exit {result.exit_status}): {str(result.stderr or '').strip()[:200]}"
            )
        return result

    async def close(self) -> None:
        self._refused.clear()
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()
        for conn in conns:
            try:
                await asyncio.wait_for(conn.wait_closed(), 5)
            except Exception:
                pass

    def __len__(self) -> int:
        return sum(1 for c in self._conns.values() if not c.is_closed())


_SHARED: dict[tuple, ConnectionPool] = {}


def shared_pool(system: dict | None) -> ConnectionPool:
    """The process-wide pool for these connection settings.

    Every launcher built for the same system (one per benchmark, or one per spec) gets the
    same pool, so each node keeps a single connection for the whole run.
    """
    s = SSHSettings(system)
    key = (s.key, s.known_hosts, s.strict, s.connect_timeout)
    pool = _SHARED.get(key)
    if pool is None:
        pool = _SHARED[key] = ConnectionPool(system)
    return pool


async def run_here(argv: list[str], timeout: float) -> tuple[int, str, str]:
    """Run a probe on this machine (a node that is local) like `ConnectionPool.run` runs
    it over SSH: own session, no stdin, killed on timeout or cancellation."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError):
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")
