"""`SSHLauncher`: start a `ProcessSpec` on another node, with the local launcher's interface.

Remote processes always get ``DATA_FD=1``: records come smuggled in standard output.
For a ``"smuggle"`` spec the handle hands stdout over untouched with ``data=None`` and
the runner separates the records; for an ``"fd"`` spec the handle separates them itself
(the same `benchkit.channel.SmuggleDecoder`) and offers them as its ``data`` stream. A
spec holds the main node's paths: when the run copied the code to the node (a
`CodeLayout` activated by `milabench.remote.codesync.push_for_run`), the working
directory, argv words and path-valued variables become the node's, and the copied
``package_dir`` goes first on ``PYTHONPATH``; without a layout nothing is rewritten. The
command leads its own remote session and reports its PGID first (`milabench.remote.ssh`);
`terminate` and `kill` signal that whole group over the node's connection. Why:
docs/multinode.md "Running a multi-node benchmark" and "Without a shared filesystem".
"""

from __future__ import annotations

import asyncio
import shlex
import uuid
from collections.abc import AsyncIterator

from benchkit.channel import SmuggleDecoder
from milabench.config.topology import node_label
from milabench.errors import NodeError
from milabench.execute.cleanup import TOKEN_VAR
from milabench.execute.launcher import Launcher, ProcessHandle
from milabench.remote.codesync import CodeLayout, layout_for
from milabench.remote.docker import docker_wrap
from milabench.remote.ssh import (
    PGID_PREFIX,
    WRITE_ENV_FILE,
    ConnectionPool,
    env_script,
    remote_command,
    shared_pool,
)

_EOF = None
SIGNAL_TIMEOUT = 5.0  # seconds for one remote kill round trip
START_TIMEOUT = 60.0  # seconds for sshd to open the session channel of a benchmark
EXIT_POLL = 0.1  # seconds between looks at whether sshd reported the exit status


class _Batches:
    """An async iterator of line batches (``list[str]``) fed by a pump task."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[list[str] | None] = asyncio.Queue()

    def put(self, lines: list[str]) -> None:
        if lines:
            self._queue.put_nowait(lines)

    def close(self) -> None:
        self._queue.put_nowait(_EOF)

    def __aiter__(self) -> AsyncIterator[list[str]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[list[str]]:
        while True:
            batch = await self._queue.get()
            if batch is _EOF:
                return
            yield batch


def _strip_cr(line: str) -> str:
    return line[:-1] if line.endswith("\r") else line


class RemoteHandle(ProcessHandle):
    """One remote process group: line batches, exit status, stop and cleanup.

    Records always arrive smuggled in ``stdout`` (``DATA_FD=1``). For a ``"smuggle"`` spec
    ``data`` is None and the runner separates them, exactly as for a local torchrun; for an
    ``"fd"`` spec (which the runner reads from ``data``) the handle separates them here.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        node: dict,
        process,
        command: str,
        token: str,
        *,
        split_data: bool = False,
    ) -> None:
        self.pool = pool
        self.node = node
        self.command = command
        self.token = token
        self._out = _Batches()
        self._err = _Batches()
        self.stdout = self._out
        self.stderr = self._err
        # "smuggle" specs: the runner decodes stdout itself (data=None). "fd" specs: the
        # runner expects a separate data stream, so the records are taken out here.
        self._data = _Batches() if split_data else None
        self.data = self._data
        self._decoder = SmuggleDecoder() if split_data else None
        self.pgid: int | None = None
        self._pgid_known = asyncio.Event()
        self._process = process
        self.returncode: int | None = None
        self._pumps = [
            asyncio.create_task(self._pump(process.stdout, self._out, first_is_pgid=True)),
            asyncio.create_task(self._pump(process.stderr, self._err, first_is_pgid=False)),
        ]

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        """The remote PGID (the remote leader's pid), once reported."""
        return self.pgid

    async def _pump(self, stream, batches: _Batches, *, first_is_pgid: bool) -> None:
        partial = ""
        expect_pgid = first_is_pgid
        try:
            while True:
                chunk = await stream.read(65536)
                if not chunk:
                    break
                partial += chunk
                if "\n" not in partial:
                    continue
                *lines, partial = partial.split("\n")
                if expect_pgid:
                    expect_pgid = False
                    if lines[0].startswith(PGID_PREFIX):
                        self._set_pgid(lines.pop(0)[len(PGID_PREFIX) :])
                self._deliver(batches, lines)
            if partial:
                self._deliver(batches, [partial])
        except Exception:  # the connection dropped: end the stream, wait() reports it
            pass
        finally:
            if first_is_pgid:
                self._pgid_known.set()
                if self._data is not None:
                    self._data.close()
            batches.close()

    def _deliver(self, batches: _Batches, lines: list[str]) -> None:
        lines = [_strip_cr(x) for x in lines]
        if self._decoder is not None and batches is self._out:
            plain: list[str] = []
            records: list[str] = []
            for line in lines:
                if "\x1b[" not in line:
                    plain.append(line)
                    continue
                text, recs = self._decoder.feed(line)
                text += self._decoder.flush()  # a record never spans two lines
                records += [r.strip() for r in recs]
                if text.strip() or not recs:
                    plain.append(text)
            self._data.put(records)  # type: ignore[union-attr]
            lines = plain
        batches.put(lines)

    def _set_pgid(self, text: str) -> None:
        try:
            self.pgid = int(text.strip())
        except ValueError:
            self.pgid = None
        self._pgid_known.set()

    async def wait(self) -> int:
        """Exit status (negative signal number when the remote leader was signalled).

        Returns once sshd has reported the exit status, even if the channel stays open:
        sshd keeps it open while anything (a leftover daemon) holds the remote output,
        and waiting for the close would make a finished benchmark run until its timeout.
        The runner then cleans the leftovers up and drains the output (bounded).
        """
        if self.returncode is None:
            closed = asyncio.ensure_future(self._process.wait_closed())
            try:
                while not closed.done() and not self._exit_known():
                    await asyncio.wait([closed], timeout=EXIT_POLL)
            finally:
                if not closed.done():
                    closed.cancel()
            if closed.done():
                await asyncio.gather(*self._pumps, return_exceptions=True)
            status = self._process.exit_status
            if status is None or status < 0:
                sig = self._process.exit_signal
                status = -_signal_number(sig[0]) if sig else 255
            self.returncode = int(status)
        return self.returncode

    def _exit_known(self) -> bool:
        return self._process.exit_status is not None or self._process.exit_signal is not None

    async def _remote_kill(self, signame: str, *, token_scan: bool) -> None:
        """One round trip: signal the remote group and, optionally, token holders.

        Bounded by `SIGNAL_TIMEOUT`: a stuck connection must not stall a stop; the channel
        is closed instead (the remote leader then loses its output pipes).
        """
        if self.pgid is None and not self._pgid_known.is_set():
            try:
                await asyncio.wait_for(self._pgid_known.wait(), SIGNAL_TIMEOUT)
            except TimeoutError:
                pass
        parts = []
        if self.pgid is not None:
            parts.append(f"kill -{signame} -{self.pgid} 2>/dev/null")  # dash: no "--"
        if token_scan:
            parts.append(
                'for p in /proc/[0-9]*; do grep -qsxzF "$1" "$p/environ" && '
                'kill -KILL "${p#/proc/}" 2>/dev/null; done'
            )
        if not parts:
            # The command never reported its group: closing the channel is all we can do.
            self._process.close()
            return
        script = "; ".join(parts) + "; true"
        try:
            await self.pool.run(
                self.node,
                ["sh", "-c", script, "milabench-kill", f"{TOKEN_VAR}={self.token}"],
                timeout=SIGNAL_TIMEOUT,
            )
        except Exception:  # NodeError, or the connection failing under us (asyncssh, OSError)
            # A stop must never raise or stall: closing the channel is what is left.
            self._process.close()

    async def send_signal(self, signame: str) -> None:
        """Signal the whole remote process group (``TERM``, ``KILL``, ``INT``)."""
        await self._remote_kill(signame, token_scan=False)

    async def kill_token_holders(self) -> None:
        """SIGKILL remote processes that escaped the group but carry our token."""
        await self._remote_kill("KILL", token_scan=True)

    async def terminate(self) -> None:
        await self.send_signal("TERM")

    async def kill(self) -> None:
        await self.send_signal("KILL")

    async def stop(self, grace: float) -> None:
        """TERM the remote group, KILL it (and token holders) after ``grace``; wait for it."""
        if self.returncode is None:
            await self.send_signal("TERM")
            try:
                await asyncio.wait_for(asyncio.shield(self.wait()), grace)
            except TimeoutError:
                pass
        await self._remote_kill("KILL", token_scan=True)
        try:
            await asyncio.wait_for(asyncio.shield(self.wait()), SIGNAL_TIMEOUT)
        except TimeoutError:
            self._process.close()

    async def cleanup(self) -> None:
        """After the leader exited: kill what is left of its group, and token holders."""
        await self._remote_kill("KILL", token_scan=True)

    def close(self) -> None:
        self._process.close()


def _signal_number(name: str) -> int:
    import signal

    try:
        return int(getattr(signal, "SIG" + name))
    except (AttributeError, TypeError):
        return 255


class SSHLauncher(Launcher):
    """Starts specs whose ``node`` is remote; one `ConnectionPool` for the whole run."""

    def __init__(self, system: dict | None = None, pool: ConnectionPool | None = None) -> None:
        self.system = system or {}
        self.pool = pool if pool is not None else shared_pool(self.system)

    def layout(self, spec) -> CodeLayout | None:
        """The node's code layout for this run (`milabench.remote.codesync`), if any."""
        return layout_for(self.system, spec.node)

    def env_for(self, spec, token: str | None = None) -> dict[str, str]:
        """The variables of the remote process (sent in an env file, never in argv).

        With a code layout, main-node paths in the values (``VOIRFILE``, the
        ``MILABENCH_DIR_*`` folders, ``PATH``, the JSON of ``MILABENCH_CONFIG``) become the
        node's, and a copied ``package_dir`` goes first on ``PYTHONPATH`` so that the
        benchmark imports the copied milabench, benchkit and benchshared.
        """
        layout = self.layout(spec)
        env = {str(k): str(v) for k, v in spec.env.items()}
        if layout is not None:
            env = {k: layout.translate_value(v) for k, v in env.items()}
            if layout.copied:
                rest = env.get("PYTHONPATH")
                env["PYTHONPATH"] = layout.package_dir + (f":{rest}" if rest else "")
        env["DATA_FD"] = "1"
        if token:
            env[TOKEN_VAR] = token
        return env

    def command_for(self, spec, token: str | None = None, env_file: str | None = None) -> str:
        """The remote shell command for ``spec`` (docker-wrapped if the system says so).

        With a code layout, the working directory and every argv word that is a main-node
        path (the script, ``voir``/``torchrun`` of an environment under the base,
        ``--option=/path``) are the node's own paths.

        No value of the environment is in it: ``env_file`` (written on the node by
        `start` from `env_for`) is sourced and removed first; docker gets names only.
        """
        env = self.env_for(spec, token)
        layout = self.layout(spec)
        here = layout.remote_path if layout is not None else str
        argv = [layout.translate(str(a)) for a in spec.argv] if layout else list(spec.argv)
        cwd = here(spec.cwd) if spec.cwd else spec.cwd
        image = self.system.get("docker_image")
        if image:
            base = _base_of(spec)
            argv = docker_wrap(
                argv,
                env,
                image=image,
                base=here(base) if base else base,
                cwd=cwd,
                arch=self.system.get("arch"),
            )
            return remote_command(argv, {}, None, env_file=env_file)
        command = remote_command(argv, {}, cwd, env_file=env_file)
        definition = spec.entry.definition
        if cwd and definition is not None and cwd != here(str(definition)):
            # a ``working_dir`` outside the synced code folder may not exist on the node
            command = f"mkdir -p -- {shlex.quote(str(cwd))} && {command}"
        return command

    async def start(self, spec) -> RemoteHandle:
        node = spec.node
        if node is None:
            raise ValueError(f"{spec.name}: no node to run on")
        conn = await self.pool.connect(node)
        token = uuid.uuid4().hex
        env_file = None
        try:
            # The variables go to a 0600 file on the node through this channel's stdin,
            # so that no value is on a command line there (``ps`` shows argv to all).
            # Bounded: an unresponsive sshd behind a live TCP connection would otherwise
            # never answer the channel request, and the run would wait here for good.
            written = await asyncio.wait_for(
                conn.run(WRITE_ENV_FILE, input=env_script(self.env_for(spec, token))),
                START_TIMEOUT,
            )
            env_file = str(written.stdout or "").strip()
            if written.exit_status != 0 or not env_file:
                raise NodeError(
                    f"cannot write the environment file ({str(written.stderr or '').strip()})"
                )
            command = self.command_for(spec, token, env_file)
            process = await asyncio.wait_for(
                conn.create_process(command, encoding="utf-8", errors="replace"), START_TIMEOUT
            )
        except Exception as err:
            if env_file:
                try:
                    await asyncio.wait_for(
                        conn.run(f"rm -f -- {shlex.quote(env_file)}"), SIGNAL_TIMEOUT
                    )
                except Exception:
                    pass
            why = f"no answer in {START_TIMEOUT:g} s" if isinstance(err, TimeoutError) else err
            raise NodeError(f"node {node_label(node)}: cannot start {spec.name}: {why}") from err
        return RemoteHandle(
            self.pool, node, process, command, token, split_data=spec.data_channel != "smuggle"
        )

    async def close(self) -> None:
        await self.pool.close()


def _base_of(spec) -> str | None:
    base = spec.entry.dirs.base
    return str(base) if base is not None else spec.env.get("MILABENCH_BASE")
