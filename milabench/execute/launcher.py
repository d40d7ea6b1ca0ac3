"""Starting one `ProcessSpec` and controlling it: the `Launcher` interface.

A launcher's ``start(spec)`` returns a `ProcessHandle`: three async iterables of line
batches (``stdout``, ``stderr``, ``data``; each yields ``list[str]`` of complete lines
without newline; ``data`` may be None when records come smuggled in stdout),
``wait() -> int``, and ``stop(grace)`` / ``cleanup()`` that guarantee nothing the process
started survives. `LocalLauncher` is the local implementation; `milabench.remote`
provides an SSH one with the same interface.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from milabench.errors import MilabenchError
from milabench.execute.cleanup import TOKEN_VAR, ProcessTracker, alive, token_processes
from milabench.execute.lines import line_batches
from milabench.plan.spec import ProcessSpec


async def _no_lines() -> AsyncIterator[list[str]]:
    return
    yield  # pragma: no cover


class ProcessHandle:
    """A running process. Subclasses implement `wait`, `stop` and `cleanup`."""

    pid: int | None = None
    stdout: AsyncIterator[list[str]]
    stderr: AsyncIterator[list[str]]
    data: AsyncIterator[list[str]] | None = None

    async def wait(self) -> int:
        raise NotImplementedError

    async def stop(self, grace: float) -> None:
        """SIGTERM everything, SIGKILL after ``grace`` seconds; returns once all are gone."""
        raise NotImplementedError

    async def cleanup(self) -> None:
        """After the main process exited: kill whatever it left behind."""
        raise NotImplementedError


class Launcher:
    async def start(self, spec: ProcessSpec) -> ProcessHandle:
        raise NotImplementedError


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Stream protocol that also reports the moment the main process exits.

    ``asyncio.subprocess.Process.wait()`` only returns once every pipe is closed too, so
    a leftover daemon holding stdout would make a finished benchmark look alive until its
    timeout. ``exited`` resolves as soon as the child watcher reaps the process.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=1 << 24, loop=loop)
        self.exited: asyncio.Future[int] = loop.create_future()

    def process_exited(self) -> None:
        transport = self._transport
        code = transport.get_returncode() if transport is not None else None
        if not self.exited.done():
            self.exited.set_result(code if code is not None else -1)
        super().process_exited()  # may close the transport (and forget it)


# Seconds the leader may look gone (reaped, or a zombie nobody reaps) while the child
# watcher has not reported its exit, before `LocalHandle` trusts its own eyes instead.
EXIT_PATIENCE = 3.0
EXIT_POLL = 0.5

# Handles whose processes may still run: what `kill_all_now` reaches when a stuck run
# has to be ended from another thread (`milabench.execute.session`'s watchdog).
_LIVE: set[LocalHandle] = set()


def kill_all_now() -> int:
    """SIGKILL every process of every live local handle, from any thread; no waiting.

    The last resort of an interrupted run that did not end in time: it must not depend
    on the event loop (which may be the thing that is stuck). Returns the handle count.
    """
    handles = list(_LIVE)  # one C-level copy: safe against the loop thread's changes
    for handle in handles:
        tracker = handle.tracker
        procs = [p for p in list(tracker.known.values()) if alive(p)]
        if tracker.leader is not None and alive(tracker.leader):
            procs.append(tracker.leader)
        if tracker.token:
            procs += token_processes(tracker.token)
        tracker.signal_all(signal.SIGKILL, procs)
    return len(handles)


_RUNNING = object()


def _peek_exit(pid: int | None) -> object:
    """``_RUNNING``, the exit status of our unreaped child ``pid``, or None (reaped).

    ``waitid(WNOWAIT)`` reads a zombie's status without reaping it, so asyncio's child
    watcher still gets it; the status is the one asyncio would report (negative signal).
    """
    if pid is None:
        return None
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None  # already reaped (by the watcher): its report is on its way, or lost
    if info is None:
        return _RUNNING
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status  # killed or dumped: the signal number


class LocalHandle(ProcessHandle):
    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        protocol: _ExitProtocol,
        data_reader: asyncio.StreamReader | None,
        data_transport: asyncio.BaseTransport | None,
        token: str,
        transport: asyncio.SubprocessTransport | None = None,
    ) -> None:
        self.proc = proc
        self.protocol = protocol
        self.pid = proc.pid
        assert proc.stdout is not None and proc.stderr is not None
        self.stdout = line_batches(proc.stdout)
        self.stderr = line_batches(proc.stderr)
        self.data = line_batches(data_reader) if data_reader is not None else None
        self._data_transport = data_transport
        self._transport = transport
        self.tracker = ProcessTracker(proc.pid, token)
        self._watch = asyncio.ensure_future(self.tracker.watch())
        self._exit_watch = asyncio.ensure_future(self._watch_exit())
        _LIVE.add(self)

    async def _watch_exit(self) -> None:
        """Resolve ``exited`` if the leader is gone yet its exit was never reported.

        The exit normally comes from asyncio's child watcher. Should that report ever be
        lost (the race fixed in `_ExitProtocol` was one such way), a benchmark without
        ``max_duration`` would wait forever; so the leader is also looked at directly,
        and once it has been over for `EXIT_PATIENCE` seconds without a report, the
        handle reports the exit itself: the status of the unreaped zombie (read with
        ``WNOWAIT``, which leaves the reaping to the watcher), else the transport's, else
        -1.
        """
        exited = self.protocol.exited
        over_since: float | None = None
        loop = asyncio.get_running_loop()
        while not exited.done():
            await asyncio.sleep(EXIT_POLL)
            status = _peek_exit(self.pid)
            if status is _RUNNING:
                over_since = None
                continue
            now = loop.time()
            over_since = now if over_since is None else over_since
            if now - over_since < EXIT_PATIENCE or exited.done():
                continue
            if status is None:
                status = self.proc.returncode
            exited.set_result(status if status is not None else -1)

    @property
    def returncode(self) -> int | None:
        exited = self.protocol.exited
        return exited.result() if exited.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self.protocol.exited)

    def _finish_watch(self) -> None:
        self._watch.cancel()

    async def stop(self, grace: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        survivors = self.tracker.survivors()
        self.tracker.signal_all(signal.SIGTERM, survivors)  # killpg reaches the leader
        if self.returncode is None:
            try:
                await asyncio.wait_for(self.wait(), grace)
            except TimeoutError:
                pass
        await self.tracker.wait_gone(survivors, max(deadline - loop.time(), 0.0))
        leftovers = self.tracker.survivors()
        if self.returncode is None or leftovers:
            self.tracker.signal_all(signal.SIGKILL, leftovers)
            if self.returncode is None and _peek_exit(self.pid) is _RUNNING:
                # Not Popen.kill(): it polls first, and that would reap the process
                # behind the child watcher's back (which then reports status 255).
                # An unreaped child's pid cannot be reused: this kill is safe.
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            await self.tracker.wait_gone(leftovers, 2.0)
        try:
            await asyncio.wait_for(self.wait(), 5.0)
        except TimeoutError:  # SIGKILLed yet not reaped: never block the suite on it
            pass
        self._finish_watch()

    async def cleanup(self) -> None:
        self._finish_watch()
        await self.tracker.kill_survivors(grace=1.0)

    def close(self) -> None:
        """Let go of every pipe (even one a stray process still holds open) and forget us.

        Called once the process is over and its output drained (or given up on): the
        read ends are closed so that nothing can keep waiting on them, and no file
        descriptor leaks from run to run.
        """
        self._finish_watch()
        self._exit_watch.cancel()
        _LIVE.discard(self)
        if self._data_transport is not None:
            self._data_transport.close()
        transport = self._transport
        if transport is None:
            return
        for fd in (1, 2):
            pipe = transport.get_pipe_transport(fd)
            if pipe is not None:
                pipe.close()
        if transport.get_returncode() is not None:
            # Only once reaped: closing a running subprocess transport would kill it.
            transport.close()


# The entry's folders a benchmark may write to without creating them first.
ENTRY_FOLDERS = ("data", "extra", "cache", "runs")


class FolderError(MilabenchError):
    """A folder a benchmark process needs cannot be created: one line naming the key."""


def ensure_folders(spec: ProcessSpec) -> None:
    """Create the entry's ``dirs`` (``data``, ``extra``, ``cache``, ``runs``) and the
    process's working directory when it is not the benchmark's folder, before it starts.

    Third-party scripts write relative paths and read ``$MILABENCH_DIR_*`` without
    creating them. Only benchmark entries (with a ``definition``) are concerned.
    """
    entry = spec.entry
    if entry.definition is None:
        return
    definition = str(entry.definition)
    wanted = [(f"dirs.{key}", entry.dirs.get(key)) for key in ENTRY_FOLDERS]
    if spec.cwd and os.path.normpath(spec.cwd) != os.path.normpath(definition):
        wanted.append(("working_dir", spec.cwd))
    for key, folder in wanted:
        if not folder:
            continue
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            reason = err.strerror or str(err)
            raise FolderError(f"{entry.name}: {key}: cannot create {folder}: {reason}") from None


class LocalLauncher(Launcher):
    """Processes on this machine, each in a new session (its own process group).

    The data channel is a pipe whose write end is passed with ``pass_fds`` and announced
    by ``DATA_FD``; for ``data_channel="smuggle"`` ``DATA_FD=1`` asks for records hidden
    in standard output instead.
    """

    async def start(self, spec: ProcessSpec) -> LocalHandle:
        ensure_folders(spec)
        loop = asyncio.get_running_loop()
        token = uuid.uuid4().hex
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in spec.env.items()})
        env[TOKEN_VAR] = token
        read_fd = write_fd = None
        pass_fds: tuple[int, ...] = ()
        if spec.data_channel == "fd":
            read_fd, write_fd = os.pipe()
            env["DATA_FD"] = str(write_fd)
            pass_fds = (write_fd,)
        else:
            env["DATA_FD"] = "1"
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _ExitProtocol(loop),
                *spec.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=spec.cwd or None,
                env=env,
                pass_fds=pass_fds,
                start_new_session=True,
            )
            proc = asyncio.subprocess.Process(transport, protocol, loop)
        except BaseException:
            for fd in (read_fd, write_fd):
                if fd is not None:
                    os.close(fd)
            raise
        reader = data_transport = None
        if write_fd is not None and read_fd is not None:
            os.close(write_fd)
            reader = asyncio.StreamReader(limit=1 << 24)
            data_transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", 0)
            )
        return LocalHandle(proc, protocol, reader, data_transport, token, transport)
