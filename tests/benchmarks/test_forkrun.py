"""forkrun.py: a script run by a child of the fork server sees what a fresh interpreter
would show it (name, arguments, folder, path, environment, warning filters, threads,
data pipe, exit hooks and status), a run past its time is killed, and an
environment that changes what torch read at import gets a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from . import forkrun
from .conftest import run_with_pipe

SCRIPT = """\
import atexit, json, os, sys, threading, time, warnings
import torch
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # imports torch._dynamo
seen = {
    "name": __name__, "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path[:2],
    "variable": os.environ.get("FORKRUN_CHECK"), "filters": [str(f) for f in warnings.filters],
    "threads": torch.get_num_threads(),
    "modules": "benchkit" in sys.modules,
}
with os.fdopen(int(os.environ["DATA_FD"]), "w") as pipe:
    pipe.write(json.dumps({"record": 1}) + "\\n")
print(json.dumps(seen))
def late():
    time.sleep(0.2)
    print("thread done", flush=True)
threading.Thread(target=late).start()
atexit.register(lambda: print("exit hook", file=sys.stderr))
sys.exit(3)
"""


def _env(tmp_path) -> dict[str, str]:
    env = dict(os.environ, FORKRUN_CHECK="yes", PYTHONPATH=str(tmp_path / "lib"))
    env.pop("MILABENCH_TEST_FORK", None)
    return env


@pytest.fixture(autouse=True)
def _served(monkeypatch):
    monkeypatch.delenv("MILABENCH_TEST_FORK", raising=False)  # these check the server


def test_a_forked_run_is_what_a_fresh_interpreter_runs(tmp_path, monkeypatch):
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "main.py").write_text(SCRIPT)
    argv = [sys.executable, "main.py", "--flag", "value"]
    forked = forkrun.run(argv, _env(tmp_path), folder, 60)
    assert forked is not None  # the same interpreter, nothing torch reads changed
    monkeypatch.setenv("MILABENCH_TEST_FORK", "0")
    fresh = run_with_pipe(argv, _env(tmp_path), folder, 60)
    assert forked["returncode"] == fresh.returncode == 3
    assert json.loads(forked["stdout"].splitlines()[0]) == json.loads(fresh.stdout.splitlines()[0])
    assert forked["stdout"].splitlines()[1:] == fresh.stdout.splitlines()[1:] == ["thread done"]
    assert forked["stderr"].strip() == fresh.stderr.strip() == "exit hook"
    assert [json.loads(x) for x in forked["data"].splitlines()] == fresh.records == [{"record": 1}]


def test_a_run_past_its_time_is_killed(tmp_path):
    (tmp_path / "main.py").write_text("import time\ntime.sleep(60)\n")
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        forkrun.run([sys.executable, "main.py"], _env(tmp_path), tmp_path, 1)
    assert time.monotonic() - start < 10


def test_what_torch_reads_at_import_changed_means_a_fresh_interpreter(tmp_path):
    (tmp_path / "main.py").write_text("print('ran')\n")
    argv = [sys.executable, "main.py"]
    for changed in ({"OMP_NUM_THREADS": "7"}, {"ATEN_CPU_CAPABILITY": "default"},
                    {"PYTHONHASHSEED": "1"}):  # fmt: skip
        assert forkrun.run(argv, {**_env(tmp_path), **changed}, tmp_path, 60) is None
    assert forkrun.run(["/usr/bin/env", "python3", "main.py"], _env(tmp_path), tmp_path, 60) is None
    assert (
        forkrun.run([sys.executable, "-W", "error", "main.py"], _env(tmp_path), tmp_path, 60)
        is None
    )
    done = forkrun.run(argv, {**_env(tmp_path), "TORCHINDUCTOR_CACHE_DIR": "/x"}, tmp_path, 60)
    assert done is not None and done["stdout"] == "ran\n"  # read when used, not at import
