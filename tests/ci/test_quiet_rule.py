"""The parallel workers' rule (tests/concurrency.py), run as the README runs the tests: a
real pytest with two xdist workers in a subprocess, on a small folder whose tests write
when they start and end. Ordinary tests share the machine in an idle CPU group; quiet
tests run one at a time in the foreground beside them; an alone test runs alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import cpuclass
import pytest
from concurrency import QUIET_FILES

TESTS = Path(__file__).resolve().parents[1]

SPELLS = """
import json, os, time

LOG = os.environ["MB_QUIET_LOG"]

def cpu_group():
    for line in open("/proc/self/cgroup").read().splitlines():
        if "cpu" in line.split(":")[1].split(","):
            return line.split(":", 2)[2]
    return None

def spell(name, seconds, **extra):
    start = time.time()
    time.sleep(seconds)
    with open(LOG, "a") as f:
        f.write(json.dumps([name, start, time.time(), cpu_group(), extra]) + "\\n")

def background():
    group = os.environ.get("MILABENCH_TEST_BACKGROUND", "")
    return os.path.isfile(os.path.join(group, "cgroup.procs"))

def wait_for(path, seconds=30):
    deadline = time.time() + seconds
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.02)
    return os.path.exists(path)
"""

# Ordinary: one test keeps every CPU busy twice over (children of its worker) until the
# quiet test has measured its share, three others just take time.
HOGS = """
import os, subprocess, sys
import pytest
from spells import background, spell, wait_for

def test_hog(tmp_path):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(2 * len(os.sched_getaffinity(0)))]
    try:
        open(os.environ["MB_HOGGING"], "w").close()
        if background():  # else the quiet test waits for this one to end
            assert wait_for(os.environ["MB_MEASURED"])
        spell("hog", 0.1, groups=[open(f"/proc/{p.pid}/cgroup").read() for p in hogs])
    finally:
        for p in hogs:
            p.kill()
            p.wait()

@pytest.mark.parametrize("i", range(3))
def test_ordinary(i):
    spell(f"ordinary{i}", 0.6)
"""

# The quiet lane: a file of QUIET_FILES, found under the same path in the folder.
LANE = """
import os, time
from spells import background, spell, wait_for

def test_share_of_a_busy_machine():
    extra = {}
    if background():
        assert wait_for(os.environ["MB_HOGGING"])
        wall, cpu = time.monotonic(), time.process_time()
        while time.monotonic() - wall < 1.0:
            pass
        extra["share"] = (time.process_time() - cpu) / (time.monotonic() - wall)
        open(os.environ["MB_MEASURED"], "w").close()
    spell("quiet0", 0.3, **extra)

def test_second():
    spell("quiet1", 0.6)
"""

ALONE = """
import pytest
from spells import spell

@pytest.mark.alone
def test_alone():
    spell("alone", 0.6)
"""

CONFTEST = """
from concurrency import configure as pytest_configure
from concurrency import pytest_collection_modifyitems, pytest_runtest_protocol, pytest_unconfigure
from concurrency import pytest_xdist_make_scheduler
"""

MARKERS = "[pytest]\nmarkers =\n    quiet: first\n    alone: alone\n    slow: long\n"


def overlap(a: list, b: list) -> bool:
    return a[1] < b[2] and b[1] < a[2]


@pytest.mark.quiet
@pytest.mark.slow
@pytest.mark.parametrize("background", ["idle group", cpuclass.OFF])
def test_quiet_tests_run_first_and_alone_tests_alone(tmp_path: Path, background: str):
    """Two workers, ``--dist loadfile``: the lane's quiet tests run in the foreground one at
    a time, beside the ordinary tests in the session's idle CPU group, and get a whole CPU
    while an ordinary test keeps every CPU busy twice over; the alone test overlaps
    nothing. Without an idle group (``MILABENCH_TEST_BACKGROUND=off``, or no writable
    cgroup v1 ``cpu``) quiet tests run alone. The run's lock files and CPU group are gone
    with it."""
    pytest.importorskip("xdist")
    (tmp_path / "spells.py").write_text(SPELLS)
    (tmp_path / "test_hogs.py").write_text(HOGS)
    lane = tmp_path / "tests" / "execute" / "test_stress.py"
    assert lane.relative_to(tmp_path).as_posix() in QUIET_FILES
    lane.parent.mkdir(parents=True)
    lane.write_text(LANE)
    (tmp_path / "test_alone.py").write_text(ALONE)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text(MARKERS)
    log = tmp_path / "spells.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(tmp_path)]), MB_QUIET_LOG=str(log))
    env.update(MB_HOGGING=str(tmp_path / "hogging"), MB_MEASURED=str(tmp_path / "measured"))
    env.pop(cpuclass.ENV, None)
    if background == cpuclass.OFF:
        env[cpuclass.ENV] = cpuclass.OFF
    run = uuid.uuid4().hex
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p",
            "no:cacheprovider", "--testrunuid", run, "--rootdir", str(tmp_path),
            str(tmp_path)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not list(Path(tempfile.gettempdir()).glob(f"milabench-tests-{run}*"))
    assert not list(cpuclass.CPU_ROOT.rglob(f"milabench-tests-{run}"))
    spells = {s[0]: s for s in map(json.loads, log.read_text().splitlines())}
    assert set(spells) == {"hog", "ordinary0", "ordinary1", "ordinary2", "quiet0", "quiet1",
                           "alone"}  # fmt: skip
    quiet = [spells["quiet0"], spells["quiet1"]]
    ordinary = [s for name, s in spells.items() if name.startswith(("ordinary", "hog"))]
    others = [s[0] for s in spells.values() if s[0] != "alone" and overlap(spells["alone"], s)]
    assert others == []
    assert not overlap(*quiet)
    if "share" not in spells["quiet0"][4]:  # no idle group here: quiet tests run alone
        assert background == cpuclass.OFF or cpuclass.problem() is not None
        for q in quiet:
            assert [s[0] for s in ordinary if overlap(q, s)] == [], q
        return
    background = f"milabench-tests-{run}"
    assert all(s[3].endswith(background) for s in ordinary), ordinary
    assert all(background in group for group in spells["hog"][4]["groups"])
    assert not any(background in q[3] for q in quiet), quiet
    assert spells["quiet0"][4]["share"] > 0.85, spells["quiet0"]
    assert any(overlap(q, s) for q in quiet for s in ordinary)  # beside the ordinary ones


MIXED = """
import pytest

def test_plain():
    pass

@pytest.mark.alone
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


def test_a_file_with_one_alone_test_is_handed_out_last(tmp_path: Path):
    """Under ``--dist loadfile`` a file goes to a worker whole, where its first test stands:
    a file holding any alone test is ordered after every ordinary file, so that its alone
    test cannot wait behind a long ordinary file on another worker."""
    (tmp_path / "test_a_mixed.py").write_text(MIXED)
    (tmp_path / "test_b_plain.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text(MARKERS)
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
    ordinary files and before the alone ones, with the time limit of making the run."""
    (tmp_path / "test_a_mixed.py").write_text(MIXED)
    (tmp_path / "test_b_reader.py").write_text(SMOKE_READER)
    (tmp_path / "test_c_plain.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "conftest.py").write_text(SMOKE_CONFTEST)
    (tmp_path / "pytest.ini").write_text(MARKERS)
    # marked slow: the only one selected by -m slow
    assert collected(tmp_path, "-m", "slow") == ["test_b_reader.py::test_reads"]
    assert collected(tmp_path) == [
        "test_c_plain.py::test_one",
        "test_b_reader.py::test_reads",
        "test_a_mixed.py::test_plain",
        "test_a_mixed.py::test_timed",
    ]


def test_within_each_part_the_longest_file_starts_first(tmp_path: Path, monkeypatch):
    """The measured table (tests/file_costs.json, here one of the test's own through
    ``MILABENCH_TEST_COSTS``) orders the files within each part, longest first; a file
    the table does not list keeps its collected place after those it lists; the smoke
    readers and the alone files stay after the ordinary ones whatever they cost."""
    (tmp_path / "test_a_mixed.py").write_text(MIXED)
    (tmp_path / "test_b_reader.py").write_text(SMOKE_READER)
    (tmp_path / "test_c_reader.py").write_text(SMOKE_READER)
    (tmp_path / "test_d_plain.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "test_e_plain.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "test_f_plain.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "conftest.py").write_text(SMOKE_CONFTEST)
    (tmp_path / "pytest.ini").write_text(MARKERS)
    costs = {"test_a_mixed.py": 900, "test_c_reader.py": 50, "test_b_reader.py": 20,
             "test_e_plain.py": 30, "test_f_plain.py": 60}  # fmt: skip
    table = tmp_path / "costs.json"
    table.write_text(json.dumps({"files": {k: {"wall": v, "cpu": v} for k, v in costs.items()}}))
    monkeypatch.setenv("MILABENCH_TEST_COSTS", str(table))
    assert collected(tmp_path) == [
        "test_f_plain.py::test_one",
        "test_e_plain.py::test_one",
        "test_d_plain.py::test_one",
        "test_c_reader.py::test_reads",
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
