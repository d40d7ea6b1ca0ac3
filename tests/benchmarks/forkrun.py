"""``python SCRIPT ARGS`` for the benchmark tests, forked from one interpreter per pytest
worker that imported torch once, instead of a fresh interpreter importing it again.

`run` hands one run to the worker's server (started at its first use, ended with the
worker); it returns None, and the caller starts a fresh interpreter as before, where the
fork could differ from one: another interpreter, interpreter options, or an environment
that changes a variable torch reads while it is imported (`SENSITIVE`). The child runs
SCRIPT as ``python SCRIPT`` would: in its folder, with that folder and the environment's
``PYTHONPATH`` first on ``sys.path``, as ``__main__``, with the given environment, the
interpreter's warning filters, standard input from /dev/null, a data pipe announced by
``DATA_FD``; its end waits for its threads and runs the atexit hooks. A fresh interpreter
costs a torch process 1.1 to 2.5 s of CPU more; ``MILABENCH_TEST_FORK=0`` turns the
server off. The server's side is forkserve.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

#: Variables that may be read while torch and torch._dynamo (and the libraries they load:
#: OpenMP, oneDNN, MKL, OpenBLAS, CUDA) are imported, and the interpreter's own: a run
#: whose value differs from the server's starts a fresh interpreter. The child applies
#: PYTHONPATH and PYTHONUNBUFFERED; torch reads the `LAZY` ones when used (inductor's
#: cache folder, the NVML check), from the child's environment. (torch sets
#: TORCHINDUCTOR_CACHE_DIR in the worker's environment once a test compiled something.)
SENSITIVE = ("PYTHON", "TORCH", "PYTORCH", "ATEN_", "ONEDNN_", "DNNL_", "MKL", "OMP_",
             "KMP_", "GOMP_", "OPENBLAS", "CUDA", "NVIDIA", "LD_", "MALLOC")  # fmt: skip
APPLIED = ("PYTHONPATH", "PYTHONUNBUFFERED")
LAZY = ("TORCHINDUCTOR_CACHE_DIR", "PYTORCH_NVML_BASED_CUDA_CHECK")
SERVE = Path(__file__).with_name("forkserve.py")


def _sensitive(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items()
            if k.startswith(SENSITIVE) and k not in APPLIED and not k.startswith(LAZY)}  # fmt: skip


class _Server:
    """The client side: one server process, one run at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.env: dict[str, str] = {}

    def start(self) -> None:
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.proc = subprocess.Popen([sys.executable, str(SERVE)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=self.env)  # fmt: skip

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()  # the server ends at the end of its input
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float,
            pipe: bool) -> dict:  # fmt: skip
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.start()
            if _sensitive(env) != _sensitive(self.env):
                return {}
            request = {"argv": argv[1:], "env": env, "cwd": str(cwd), "timeout": timeout,
                       "pipe": pipe}  # fmt: skip
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server ended (exit {self.proc.wait()})")
        return json.loads(line)


_SERVER = _Server()


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float,
        pipe: bool = True) -> dict | None:  # fmt: skip
    """``{"returncode", "stdout", "stderr", "data"}`` of ``argv`` run by a forked child,
    or None where a fresh interpreter must run it. ``pipe``: a data pipe announced by
    ``DATA_FD`` (``data``: what was written to it); without, ``env`` is the child's as
    given. Raises `subprocess.TimeoutExpired` when it ran past ``timeout`` (the child
    is killed, as `subprocess.run` kills it)."""
    if os.environ.get("MILABENCH_TEST_FORK") == "0" or len(argv) < 2:
        return None
    if argv[0] != sys.executable or not str(argv[1]).endswith(".py"):
        return None
    if pipe:  # the server makes the data pipe itself
        env = {k: v for k, v in env.items() if k != "DATA_FD"}
    done = _SERVER.run([str(a) for a in argv], env, cwd, timeout, pipe)
    if not done:
        return None
    if done.get("timed_out"):
        raise subprocess.TimeoutExpired(argv, timeout, done["stdout"], done["stderr"])
    return done


def stop() -> None:
    """End the worker's server (a fixture's finaliser, or the worker's exit)."""
    _SERVER.stop()
