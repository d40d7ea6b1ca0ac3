"""Commands on one node of a fleet: short probes, whole phases, stops and sweeps.

A phase (``milabench install|prepare|run`` on the node) is started through the
executor's own launchers, as a `ProcessSpec`: `LocalLauncher` for a node that is this
machine, `SSHLauncher` for the others (variables in a 0600 file, never on the command
line; the command leads a remote process group that ``stop`` signals as a whole).
Nothing here builds a shell line from data: probes and sweeps are argv lists quoted by
the connection pool. Every phase carries `TOKEN_VAR`; after each phase, and after a stop,
whatever still holds it on the node is killed (the sweep; why it is needed:
docs/multinode.md "Validate a new rack"). A node whose connection dropped cannot be
swept, which its record then says.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from milabench.config.topology import node_label
from milabench.errors import MilabenchError
from milabench.plan.spec import ProcessSpec

TAIL_LINES = 40
DRAIN_TIMEOUT = 5.0  # seconds to read what a finished phase still has in its pipes
SWEEP_TIMEOUT = 30.0
PROBE_TIMEOUT = 60.0
ANSWER_TIMEOUT = 20.0  # seconds a live node's sshd gets to run `true` on an open connection

# Run on the node: SIGKILL every process whose environment holds the exact entry "$1".
_SWEEP = (
    'for p in /proc/[0-9]*; do grep -qsxzF "$1" "$p/environ" && '
    'kill -KILL "${p#/proc/}" 2>/dev/null && echo "${p#/proc/}"; done; true'
)


@dataclass
class PhaseOutcome:
    """How one phase command ended.

    ``code`` is the exit status (negative: killed by that signal; None: never started or
    never reported). ``lost`` is set when the node's connection dropped meanwhile, with
    why; ``interrupted`` when the fleet was stopped (Ctrl-C, SIGTERM) during the phase.
    """

    phase: str
    code: int | None
    seconds: float
    stdout_tail: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)
    start_error: str | None = None
    lost: str | None = None
    interrupted: bool = False
    swept: int = 0


class NodeRunner:
    """Runs commands on one node, locally or over the fleet's SSH connection pool."""

    def __init__(self, system: dict, node: dict, pool, *, local: bool) -> None:
        self.system = system
        self.node = node
        self.pool = pool
        self.local = local
        self.name = str(node["name"])
        self._conn = None
        if local:
            from milabench.execute.launcher import LocalLauncher

            self.launcher = LocalLauncher()
        else:
            from milabench.remote.launcher import SSHLauncher

            # the fleet's own pool (its keepalives; closed by the fleet)
            self.launcher = SSHLauncher(system, pool)

    @property
    def label(self) -> str:
        return self.name if self.local else node_label(self.node)

    async def connect(self) -> None:
        """Open the node's connection (NodeError naming it when unreachable)."""
        if not self.local:
            self._conn = await self.pool.connect(self.node)

    def connection_dropped(self) -> bool:
        return self._conn is not None and self._conn.is_closed()

    async def _answers(self) -> bool:
        """Whether the node's open connection still runs a command (`ANSWER_TIMEOUT`)."""
        if self._conn is None or self._conn.is_closed():
            return False
        try:
            await asyncio.wait_for(self._conn.run("true", check=False), ANSWER_TIMEOUT)
            return True
        except Exception:  # closed under us, reset, or no answer: the node is gone
            return False

    async def lost_reason(self, phase: str, *, suspicious: bool = True) -> str | None:
        """Why the node counts as lost (its connection dropped), None when it did not.

        The connection object may still look open for a moment after the peer vanished
        (asyncssh closes the channels before the connection), so unless the caller knows
        the phase ended normally (``suspicious=False``), the open connection is asked to
        run ``true``: no answer means lost.
        """
        if self.local or self._conn is None:
            return None
        if not self.connection_dropped() and (not suspicious or await self._answers()):
            return None
        try:
            self._conn = await self.pool.connect(self.node)
            after = "it answers again"
        except MilabenchError as err:
            after = f"reconnecting: {_without_label(str(err))}"
        return f"connection lost during {phase} ({after})"

    # -- short commands ---------------------------------------------------------------

    async def short(
        self, argv: Sequence[str], *, input: str | None = None, timeout: float = PROBE_TIMEOUT
    ) -> tuple[int, str, str]:
        """Run a short command to completion: ``(exit status, stdout, stderr)``."""
        if self.local:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            try:
                out, err = await asyncio.wait_for(
                    proc.communicate(input.encode() if input is not None else None), timeout
                )
            except (TimeoutError, asyncio.CancelledError):
                proc.kill()
                await proc.wait()
                raise
            return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")
        import shlex

        conn = await self.pool.connect(self.node)
        command = shlex.join(str(a) for a in argv)
        result = await asyncio.wait_for(conn.run(command, input=input, check=False), timeout)
        status = result.exit_status if result.exit_status is not None else 255
        return status, str(result.stdout or ""), str(result.stderr or "")

    async def write_file(self, path: str, text: str) -> None:
        """Create ``path`` (and its parents) on the node with ``text`` in it."""
        if self.local:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
            return
        script = 'mkdir -p -- "${1%/*}" && cat > "$1"'
        code, _, err = await self.short(["sh", "-c", script, "milabench-fleet", path], input=text)
        if code != 0:
            raise OSError(f"cannot write {path}: {err.strip() or f'exit {code}'}")

    async def sweep(self, token_entry: str) -> int:
        """SIGKILL what still carries ``token_entry`` (``NAME=value``) on the node; count."""
        if self.local:
            return await asyncio.to_thread(_sweep_here, token_entry)
        try:
            code, out, _ = await self.short(
                ["sh", "-c", _SWEEP, "milabench-fleet-sweep", token_entry], timeout=SWEEP_TIMEOUT
            )
        except Exception:  # the node is gone or stuck: its record says so elsewhere
            return 0
        return len([line for line in out.split() if line.strip().isdigit()])

    # -- phases -------------------------------------------------------------------------

    async def run_phase(
        self,
        phase: str,
        spec: ProcessSpec,
        logs: Path,
        *,
        stop: asyncio.Event,
        hard: asyncio.Event,
        grace: float,
        token_entry: str,
    ) -> PhaseOutcome:
        """Run ``spec`` to its end, or until ``stop``; output into ``logs/<phase>.*``.

        On ``stop`` the process group is sent SIGTERM (the node's milabench then stops its
        benchmarks and writes its partial report) and SIGKILL after ``grace`` seconds, or
        at once when ``hard`` is set. Every path ends with a sweep of ``token_entry``.
        """
        started = time.monotonic()
        try:
            handle = await self.launcher.start(spec)
        except (MilabenchError, OSError) as err:
            lost = await self.lost_reason(phase)
            return PhaseOutcome(
                phase,
                None,
                time.monotonic() - started,
                start_error=_without_label(str(err)),
                lost=lost,
                interrupted=stop.is_set(),
                swept=await self.sweep(token_entry) if lost is None else 0,
            )
        out_tail: deque[str] = deque(maxlen=TAIL_LINES)
        err_tail: deque[str] = deque(maxlen=TAIL_LINES)
        pumps = [
            asyncio.ensure_future(_pump(handle.stdout, logs / f"{phase}.stdout", out_tail)),
            asyncio.ensure_future(_pump(handle.stderr, logs / f"{phase}.stderr", err_tail)),
        ]
        waiter = asyncio.ensure_future(handle.wait())
        interrupted = False
        try:
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
            if not waiter.done():
                interrupted = True
                await _stop(handle, grace, hard)
        except asyncio.CancelledError:
            await asyncio.shield(_stop(handle, 0.0, hard))
            raise
        finally:
            code = await _result_within(waiter, 10.0)
            if not self.connection_dropped():  # else nothing can reach the node's processes
                try:
                    await asyncio.wait_for(handle.cleanup(), 15.0)
                except Exception:
                    pass
            await _drain(pumps, 1.0 if interrupted else DRAIN_TIMEOUT)
            close = getattr(handle, "close", None)
            if close is not None:
                close()
        lost = await self.lost_reason(phase, suspicious=code is None or code < 0 or code == 255)
        swept = 0 if lost else await self.sweep(token_entry)
        return PhaseOutcome(
            phase,
            code,
            time.monotonic() - started,
            list(out_tail),
            list(err_tail),
            lost=lost,
            interrupted=interrupted,
            swept=swept,
        )


async def _pump(stream: AsyncIterator[list[str]], path: Path, tail: deque[str]) -> None:
    with open(path, "a", encoding="utf-8", errors="replace") as f:
        async for batch in stream:
            f.write("".join(line + "\n" for line in batch))
            f.flush()
            tail.extend(batch)


async def _stop(handle, grace: float, hard: asyncio.Event) -> None:
    """``handle.stop(grace)``, cut short (grace 0) once ``hard`` is set."""
    stopping = asyncio.ensure_future(handle.stop(grace))
    hurry = asyncio.ensure_future(hard.wait())
    try:
        await asyncio.wait({stopping, hurry}, return_when=asyncio.FIRST_COMPLETED)
        if not stopping.done():
            await asyncio.wait_for(handle.stop(0.0), 30.0)
            await asyncio.wait({stopping}, timeout=10.0)
    except Exception:
        pass
    finally:
        hurry.cancel()
        if not stopping.done():
            stopping.cancel()


async def _result_within(task: asyncio.Future, timeout: float) -> int | None:
    try:
        return int(await asyncio.wait_for(asyncio.shield(task), timeout))
    except Exception:
        task.cancel()
        return None


async def _drain(pumps: list[asyncio.Future], timeout: float) -> None:
    _, pending = await asyncio.wait(pumps, timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pumps, return_exceptions=True)


def _sweep_here(entry: str) -> int:
    """The local sweep: SIGKILL this machine's processes whose environment has ``entry``."""
    needle = entry.encode()
    me = os.getpid()
    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                found = needle in f.read().split(b"\0")
        except OSError:
            continue
        if found:
            try:
                os.kill(int(name), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


def _without_label(message: str) -> str:
    """``node n1 (u@h:22): connection refused`` -> ``connection refused``."""
    if message.startswith("node ") and "): " in message:
        return message.split("): ", 1)[1]
    return message
