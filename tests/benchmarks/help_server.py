"""Run ``main.py --help`` of many benchmark folders, each in a process of its own forked
from one that imported torch (and transformers, when installed) once.

    python tests/benchmarks/help_server.py BENCHMARKS NAME [NAME...]

prints one JSON object: ``{NAME: {"returncode", "stdout", "stderr", "records"}}``. Each
child runs ``BENCHMARKS/NAME/main.py`` as ``python main.py --help`` would: in that folder,
with the folder first on ``sys.path``, as ``__main__`` with fresh globals, and a data pipe
announced by ``DATA_FD`` (``records``: what it wrote there). What the parent imported is
only what every main imports first, so a fresh process would start the same way less
those seconds of CPU; the child's exit runs the atexit hooks, as the interpreter's would.
The imports are made before any thread starts.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import shutil
import sys
import tempfile
import warnings


def _child(folder: str, out: str, err: str, data_fd: int) -> int:
    """In the forked child: run main.py --help; its exit status."""
    for fd, path in ((1, out), (2, err)):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(handle, fd)
        os.close(handle)
    os.chdir(folder)
    os.environ["DATA_FD"] = str(data_fd)
    sys.path[:] = [folder, *sys.path[1:]]
    sys.argv = [os.path.join(folder, "main.py"), "--help"]
    code = 0
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as Python would, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()  # what the interpreter's exit runs: the data channel's close
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _run_one(root: str, name: str, tmp: str) -> dict:
    """Fork one child for ``name`` and collect its status, output and records."""
    out, err = os.path.join(tmp, f"{name}.out"), os.path.join(tmp, f"{name}.err")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code = 1
        try:
            code = _child(os.path.join(root, name), out, err, write_end)
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        data = reader.read()
    _, status = os.waitpid(pid, 0)
    with open(out, encoding="utf-8", errors="replace") as handle:
        stdout = handle.read()
    with open(err, encoding="utf-8", errors="replace") as handle:
        stderr = handle.read()
    lines = data.decode(errors="replace").splitlines()
    return {
        "returncode": os.waitstatus_to_exitcode(status),
        "stdout": stdout,
        "stderr": stderr,
        "records": [json.loads(line) for line in lines if line.strip()],
    }


def main() -> int:
    root, names = sys.argv[1], sys.argv[2:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch  # noqa: F401 - what every torch main imports first

        try:
            import transformers  # noqa: F401
        except ImportError:
            pass
    # not TemporaryDirectory: its clean-up is an atexit hook, which a child ending the way
    # benchkit ends a run (atexit._run_exitfuncs, then os._exit) would run too
    tmp = tempfile.mkdtemp(prefix="milabench-help-")
    try:
        results = {name: _run_one(root, name, tmp) for name in names}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
