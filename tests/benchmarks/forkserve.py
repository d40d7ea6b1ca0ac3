"""The fork server of forkrun.py: imports torch (and torch._dynamo, which torch imports
for a benchmark's optimiser: 1.1 s more) once, then runs one script per request, each in
a child forked for it.

    python tests/benchmarks/forkserve.py

reads one JSON request a line on standard input (``argv``: the script and its
arguments, ``env``, ``cwd``, ``timeout``, ``pipe``: whether to give it a data pipe) and
answers each with one JSON line: ``returncode``, ``stdout``, ``stderr``, ``data`` (what
the child wrote to its data pipe) and ``timed_out``. It ends at the end of its input. Started without ``PYTHONPATH``, its
``sys.path`` past its own folder is the interpreter's, which each child puts after the
script's folder and its own ``PYTHONPATH``. Torch is imported before any thread starts,
so the children inherit none.
"""

from __future__ import annotations

import atexit
import builtins
import io
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import types
from importlib.machinery import SourceFileLoader

#: After the child ended, how long its data pipe may stay open (a process it left).
DRAIN_AFTER_EXIT = 30.0


def _stream(fd: int, unbuffered: bool, errors: str) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    binary = raw if unbuffered else io.BufferedWriter(raw)
    return io.TextIOWrapper(binary, encoding="utf-8", errors=errors, write_through=unbuffered)


def _exit_code(done: SystemExit) -> int:
    """The status Python's own exit gives ``done`` (a message is printed, status 1)."""
    if done.code is None:
        return 0
    if isinstance(done.code, int):
        return done.code & 0xFF
    print(done.code, file=sys.stderr)
    return 1


def _run_script(path: str) -> None:
    """Run the file at ``path`` as the interpreter runs a script: a module ``__main__``
    with ``__file__`` absolute (``sys.argv[0]`` stays as given)."""
    with open(path, "rb") as handle:
        code = compile(handle.read(), path, "exec")
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __builtins__=builtins,
                         __loader__=SourceFileLoader("__main__", path))  # fmt: skip
    sys.modules["__main__"] = main
    exec(code, main.__dict__)  # noqa: S102 - what running a script is


def _child(request: dict, out: str, err: str, data_fd: int | None, base: list) -> int:
    """In the forked child: become ``python SCRIPT ARGS`` and run it; its exit status."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, out), (2, err)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    env = request["env"]
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(env)
    if data_fd is not None:
        os.environ["DATA_FD"] = str(data_fd)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdout = _stream(1, unbuffered, "strict")
    sys.stderr = _stream(2, True, "backslashreplace")
    script = os.path.abspath(request["argv"][0])
    extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.dirname(script), *extra, *base]
    sys.argv = list(request["argv"])
    tempfile.tempdir = None  # read again from this environment
    if "numpy" in sys.modules:  # a fresh interpreter seeds it from the system's entropy
        sys.modules["numpy"].random.seed()
    code = 0
    try:
        _run_script(script)
    except SystemExit as done:
        code = _exit_code(done)
    except BaseException:  # noqa: BLE001 - reported as Python reports it, status 1
        traceback.print_exc()
        code = 1
    finally:
        threading._shutdown()  # noqa: SLF001 - what the interpreter's exit waits for
        atexit._run_exitfuncs()  # noqa: SLF001 - and then runs
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _collect(pid: int, read_end: int | None, timeout: float) -> tuple[bytes, int | None]:
    """The child's data and its wait status; None for a child killed at ``timeout``.
    Once the child ended, its pipe may stay open `DRAIN_AFTER_EXIT` more (a process it
    left behind), as the thread reading the pipe of a fresh interpreter is waited for."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    status: int | None = None
    open_pipe = read_end is not None
    while open_pipe or status is None:
        if status is None:
            done, status_now = os.waitpid(pid, os.WNOHANG)
            if done:
                status = status_now
                deadline = time.monotonic() + DRAIN_AFTER_EXIT
                continue
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if not open_pipe:
            time.sleep(min(left, 0.005))
            continue
        ready, _, _ = select.select([read_end], [], [], min(left, 0.05))
        if ready:
            chunk = os.read(read_end, 65536)
            chunks.append(chunk)
            open_pipe = bool(chunk)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return b"".join(chunks), status


def _run_one(request: dict, tmp: str, base: list) -> dict:
    out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
    read_end, write_end = os.pipe() if request["pipe"] else (None, None)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if read_end is not None:
                os.close(read_end)
            code = _child(request, out, err, write_end, base)
        finally:
            os._exit(code)
    if write_end is not None:
        os.close(write_end)
    try:
        data, status = _collect(pid, read_end, float(request["timeout"]))
    finally:
        if read_end is not None:
            os.close(read_end)
    texts = []
    for path in (out, err):
        with open(path, encoding="utf-8", errors="replace") as handle:
            texts.append(handle.read())
    return {
        "returncode": None if status is None else os.waitstatus_to_exitcode(status),
        "timed_out": status is None,
        "stdout": texts[0],
        "stderr": texts[1],
        "data": data.decode(errors="replace"),
    }


def serve() -> int:
    import torch  # noqa: F401 - what the benchmarks import first (and its warning filters)
    import torch._dynamo  # noqa: F401 - what an optimiser or a FLOP counter imports

    base = sys.path[1:]
    # not TemporaryDirectory: its clean-up is an atexit hook, which every child runs
    tmp = tempfile.mkdtemp(prefix="milabench-fork-")
    try:
        for line in sys.stdin.buffer:
            result = _run_one(json.loads(line), tmp, base)
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve())
