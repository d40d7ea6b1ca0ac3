"""The parallel workers' rule (tests/concurrency.py), run as the README runs the tests: a
real pytest with two xdist workers in a subprocess, on a small folder whose tests write
when they start and end. Ordinary tests share the machine; a quiet test runs alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

CASES = """
import json, os, time
import pytest

LOG = os.environ["MB_QUIET_LOG"]

def spell(name, seconds):
    start = time.time()
    time.sleep(seconds)
    with open(LOG, "a") as f:
        f.write(json.dumps([name, start, time.time()]) + "\\n")

@pytest.mark.parametrize("i", range(4))
def test_ordinary(i):
    spell(f"ordinary{i}", 0.6)
"""

QUIET = """
import pytest
from test_ordinary import spell

@pytest.mark.quiet
@pytest.mark.parametrize("i", range(2))
def test_quiet(i):
    spell(f"quiet{i}", 0.6)
"""

CONFTEST = """
from concurrency import configure as pytest_configure
from concurrency import pytest_collection_modifyitems, pytest_runtest_protocol, pytest_unconfigure
"""


def overlap(a: list, b: list) -> bool:
    return a[1] < b[2] and b[1] < a[2]


@pytest.mark.slow
def test_quiet_tests_run_alone_and_the_others_in_parallel(tmp_path: Path):
    pytest.importorskip("xdist")
    (tmp_path / "test_ordinary.py").write_text(CASES)
    (tmp_path / "test_quiet.py").write_text(QUIET)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    quiet: alone\n")
    log = tmp_path / "spells.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(tmp_path)]), MB_QUIET_LOG=str(log))
    run = uuid.uuid4().hex
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
            "--testrunuid", run, "--rootdir", str(tmp_path), str(tmp_path)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # the run's lock files are gone with it
    assert not list(Path(tempfile.gettempdir()).glob(f"milabench-tests-{run}*"))
    spells = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(spells) == 6
    quiet = [s for s in spells if s[0].startswith("quiet")]
    ordinary = [s for s in spells if s[0].startswith("ordinary")]
    for q in quiet:
        others = [s[0] for s in spells if s is not q and overlap(q, s)]
        assert others == [], (q[0], others)
    # the ordinary ones did share the machine: two ran at once at least once
    assert any(overlap(a, b) for i, a in enumerate(ordinary) for b in ordinary[i + 1 :])


MIXED = """
import pytest

def test_plain():
    pass

@pytest.mark.quiet
def test_timed():
    pass
"""


def collected(folder: Path, *extra: str) -> list[str]:
    """The test ids of ``folder`` in the session's order (``pytest --collect-only``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(folder)]))
    argv = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
            "--rootdir", str(folder), str(folder), *extra]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=folder,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_a_file_with_one_quiet_test_is_handed_out_last(tmp_path: Path):
    """Under ``--dist loadfile`` a file goes to a worker whole, where its first test stands:
    a file holding any quiet test is ordered after every ordinary file, so that its quiet
    test cannot wait behind a long ordinary file on the other worker."""
    (tmp_path / "test_a_mixed.py").write_text(MIXED)
    (tmp_path / "test_b_plain.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    quiet: alone\n")
    assert collected(tmp_path) == [
        "test_b_plain.py::test_one",
        "test_a_mixed.py::test_plain",
        "test_a_mixed.py::test_timed",
    ]


SMOKE_READER = """
def test_reads(smoke):
    assert smoke == "run"
"""

SMOKE_CONFTEST = (
    CONFTEST
    + """
import pytest

@pytest.fixture(scope="session")
def smoke():
    return "run"
"""
)


def test_a_file_reading_the_smoke_run_comes_after_the_ordinary_ones(tmp_path: Path):
    """The files that read the shared smoke run (the ``smoke`` fixture) start after the
    ordinary files and before the quiet ones, with the time limit of making the run."""
    (tmp_path / "test_a_mixed.py").write_text(MIXED)
    (tmp_path / "test_b_reader.py").write_text(SMOKE_READER)
    (tmp_path / "test_c_plain.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "conftest.py").write_text(SMOKE_CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    quiet: alone\n    slow: long\n")
    # marked slow: the only one selected by -m slow
    assert collected(tmp_path, "-m", "slow") == ["test_b_reader.py::test_reads"]
    assert collected(tmp_path) == [
        "test_c_plain.py::test_one",
        "test_b_reader.py::test_reads",
        "test_a_mixed.py::test_plain",
        "test_a_mixed.py::test_timed",
    ]


SHARED = """
import json, os, time
from sharedbuild import build_once

def build(folder):
    with open(os.environ["MB_BUILD_LOG"], "a") as log:
        log.write(str(folder) + "\\n")
    time.sleep(1)
    if os.environ.get("MB_BUILD_FAILS"):
        raise RuntimeError("the build broke")
    (folder / "made").write_text("yes")
    return {"folder": str(folder)}

def test_uses_it(tmp_path_factory):
    value = build_once(tmp_path_factory, "thing", build)
    assert open(os.path.join(value["folder"], "made")).read() == "yes"
"""


@pytest.mark.parametrize("fails", [False, True])
def test_a_shared_build_is_made_once_for_every_worker(tmp_path: Path, fails: bool):
    """`sharedbuild.build_once` from two files on two workers: one build, both tests get
    its value; a failed build fails both with its error, without a second try."""
    pytest.importorskip("xdist")
    (tmp_path / "test_one.py").write_text(SHARED)
    (tmp_path / "test_two.py").write_text(SHARED)
    log = tmp_path / "builds.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(tmp_path)]), MB_BUILD_LOG=str(log))
    if fails:
        env["MB_BUILD_FAILS"] = "1"
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p",
            "no:cacheprovider", "--basetemp", str(tmp_path / "bt"), "--rootdir", str(tmp_path),
            str(tmp_path)]  # fmt: skip
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)  # fmt: skip
    builds = log.read_text().splitlines()
    assert len(builds) == 1 and builds[0] == str(tmp_path / "bt" / "thing"), builds
    if not fails:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "2 passed" in done.stdout
    else:
        assert done.returncode == 1 and "2 failed" in done.stdout, done.stdout[-3000:]
        assert "the shared build 'thing' failed" in done.stdout
        assert "RuntimeError: the build broke" in done.stdout


def test_auto_workers_are_one_more_than_the_cpus():
    """``-n auto`` (`concurrency.pytest_xdist_auto_num_workers`) in a process that may use
    one CPU (``taskset -c 0``) and in one that may use every CPU of this machine."""
    from systemtools import require

    require("taskset")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from concurrency import pytest_xdist_auto_num_workers as n; print(n(None))"
    )
    tests = str(Path(__file__).resolve().parents[1])
    one = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code, tests],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert one.stdout.strip() == "2"
    every = subprocess.run([sys.executable, "-c", code, tests], capture_output=True,
                           text=True, check=True)  # fmt: skip
    assert int(every.stdout) == min(4, len(os.sched_getaffinity(0)) + 1)
