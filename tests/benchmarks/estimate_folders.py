"""Meta-device estimates of many benchmark folders from one interpreter that imports torch
(and transformers with its model base, when installed) once, then forks one process per
folder.

    python tests/benchmarks/estimate_folders.py ROOT < {"FOLDER": [job, ...], ...}

prints ``{"FOLDER": [result, ...], ...}``: each folder's results as
``python -m benchkit.memory FOLDER --jobs -`` prints them, from a child that runs in
FOLDER with ROOT and FOLDER first on ``sys.path``, as that command would. Two children at
a time. A child that fails gives ``{"crashed": "..."}`` for its folder. The imports are
made before any thread pool starts, so the children inherit no running threads.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import traceback
import warnings
from contextlib import redirect_stdout

PARALLEL = 2


def _child(root: str, folder: str, jobs: list[dict], out: str) -> int:
    os.chdir(folder)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [root, folder, *(p for p in sys.path if p != here)]
    sys.stdin = io.StringIO(json.dumps(jobs))
    from benchkit.memory import main

    buffer = io.StringIO()
    try:
        with redirect_stdout(buffer):
            main([folder, "--jobs", "-"])
        text = buffer.getvalue()
    except BaseException:  # noqa: BLE001 - the parent reports it for this folder
        text = json.dumps({"crashed": traceback.format_exc()[-3000:]})
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(text)
    return 0


def main() -> int:
    root = sys.argv[1]
    todo: dict[str, list[dict]] = json.loads(sys.stdin.read())
    warnings.simplefilter("ignore")
    import torch  # noqa: F401 - shared by every child
    import torch._dynamo  # noqa: F401 - what the first dispatch of a measuring mode imports

    try:  # and the modules transformers loads lazily, which every model of it needs
        import transformers  # noqa: F401
        import transformers.activations  # noqa: F401
        import transformers.modeling_utils  # noqa: F401
    except ImportError:
        pass
    folder_of: dict[int, tuple[str, str]] = {}
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pending = list(todo.items())
        while pending or folder_of:
            while pending and len(folder_of) < PARALLEL:
                folder, jobs = pending.pop(0)
                out = os.path.join(tmp, f"{len(results) + len(folder_of)}.json")
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        code = _child(root, folder, jobs, out)
                    finally:
                        os._exit(code)
                folder_of[pid] = (folder, out)
            pid, status = os.wait()
            folder, out = folder_of.pop(pid)
            try:
                with open(out, encoding="utf-8") as handle:
                    results[folder] = json.loads(handle.read())
            except (OSError, ValueError):
                results[folder] = {"crashed": f"exit status {status}, no result"}
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
