"""`benchkit.exiting.run_and_exit` in real processes: a clean ending skips only the
interpreter's teardown (threads joined, atexit handlers run, streams flushed, daemon
children stopped); every other ending is the interpreter's own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A process with everything a normal exit must still finish: a non-daemon thread that
# writes late, an atexit handler, buffered stdout, a daemon child process; and an
# object whose __del__ runs only when the interpreter frees the module (its teardown).
SCRIPT = """
import atexit, multiprocessing, sys, threading, time
from pathlib import Path
from benchkit.exiting import run_and_exit
from benchkit.stopping import StopProgram

OUT = Path(sys.argv[1])
ENDING = sys.argv[2]

class Teardown:
    def __del__(self, _open=open, _path=str(OUT / "teardown")):  # names kept: globals go first
        with _open(_path, "w") as f:
            f.write("freed")

keep = Teardown()

def late():
    time.sleep(0.3)
    (OUT / "thread").write_text("joined")

def child():
    time.sleep(60)

def main():
    if ENDING == "voir":
        sys.modules["voir"] = type(sys)("voir")  # what running under voir leaves loaded
    atexit.register(lambda: (OUT / "atexit").write_text("ran"))
    threading.Thread(target=late).start()
    proc = multiprocessing.Process(target=child, daemon=True)
    proc.start()
    (OUT / "child").write_text(str(proc.pid))
    sys.stdout.write("buffered line")  # no newline, no flush
    if ENDING == "stop":
        raise StopProgram()
    if ENDING == "error":
        raise RuntimeError("boom")
    if ENDING == "message":
        raise SystemExit("bad input")
    if ENDING == "code":
        return 3
    if ENDING == "exit0":
        sys.exit(0)

if __name__ == "__main__":
    run_and_exit(main)
"""


def run(tmp_path: Path, ending: str) -> subprocess.CompletedProcess:
    script = tmp_path / "bench.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path), ending],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def child_gone(tmp_path: Path) -> bool:
    pid = int((tmp_path / "child").read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.kill(pid, 9)
    return False


@pytest.mark.parametrize("ending", ["return", "stop", "exit0"])
def test_clean_ending_skips_only_the_teardown(tmp_path, ending):
    done = run(tmp_path, ending)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "buffered line"
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert child_gone(tmp_path)
    assert not (tmp_path / "teardown").exists()  # modules were not freed one by one


@pytest.mark.parametrize(
    ("ending", "code", "stderr"),
    [("error", 1, "RuntimeError: boom"), ("message", 1, "bad input"), ("code", 3, ""),
     ("voir", 0, "")],
)  # fmt: skip
def test_other_endings_are_the_interpreters(tmp_path, ending, code, stderr):
    done = run(tmp_path, ending)
    assert done.returncode == code, done.stderr
    assert stderr in done.stderr
    assert done.stdout == "buffered line"
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert child_gone(tmp_path)
    assert (tmp_path / "teardown").read_text() == "freed"
