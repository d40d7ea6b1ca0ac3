"""Running the tests on parallel workers (pytest-xdist, ``-n auto`` in the README's
command: `pytest_xdist_auto_num_workers`) without one test disturbing another.

* **Quiet tests run alone.** A test that measures the machine (rates compared across
  nodes or runs, a CPU hog that must be the only neighbour, wall-clock bounds) is marked
  ``quiet``: while it runs (setup, call, teardown) no other test runs on any worker, and
  it waits for the running ones to end. Every other test may share the machine with the
  other workers' tests. The marker is set on the files of `QUIET_FILES`
  (`pytest_collection_modifyitems`) or by ``@pytest.mark.quiet`` on a test. Quiet tests
  run at the end of the session, the longest ordinary files (`FIRST_FILES`) at its
  start, the files reading the shared smoke run (the ``smoke`` fixture) after the
  ordinary ones.
* **OpenMP threads sleep when they wait** (`OPENMP_WAIT`): every process of the session
  and everything it starts gets ``OMP_WAIT_POLICY=PASSIVE`` unless it was set.
* **One apt-get at a time** (`machine_lock`): dpkg takes a lock of its own and a second
  install fails at once instead of waiting.

The quiet rule and the apt-get rule are `fcntl.flock` locks on files of the temporary
folder: the quiet rule is a readers-writer lock shared by the workers of one run
(``PYTEST_XDIST_TESTRUNUID``), with a turnstile so that a quiet test waiting for the
others is not passed by the next test of another worker. Without xdist nothing is locked
(a single process runs one test at a time anyway).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# Test files whose every test measures or bounds time on the real machine.
QUIET_FILES = frozenset(
    {  # files with a few such tests mark those tests instead (@pytest.mark.quiet)
        "tests/benchkit/test_device_events.py",  # live rates within a 1.5 s window
        "tests/benchkit/test_distributed.py",  # a window of 1.5 s across two ranks
        "tests/benchkit/test_thirdparty_suite.py",  # three rates within a 1.5 s window
        "tests/ci/test_workflow.py",  # a planted regression found on real runs
        "tests/doctor/test_interference_run.py",  # the hog must be the only neighbour
        "tests/execute/test_runner.py",
        "tests/execute/test_stress.py",
        "tests/history/test_history_cli.py",  # change points on real paced runs
        "tests/history/test_site.py",  # the same runs (nightly_runs.py), made alone
        "tests/report/test_real_runs.py",  # A/B of real runs
        "tests/scripts/test_emulated_hosts.py",
    }
)

# The longest ordinary files, started first: each overlaps the rest of the suite on the
# other worker instead of ending it alone.
FIRST_FILES = (
    "tests/benchmarks/test_standard_smoke.py",  # every standard entry, installed and run
    "tests/benchmarks/test_memory_estimates.py",  # every entry built on the meta device
    "tests/envs/test_pins_reproduce.py",
)

QUIET = "quiet"
# The session-scoped fixture of the shared smoke run (tests/benchmarks/smokerun.py): the
# first test that asks makes the run (minutes) while the others wait for it, so a file
# that reads it is handed out after the ordinary files, when the run (started first, by
# test_standard_smoke.py) is made; and its tests may take as long as making it.
SMOKE_FIXTURE = "smoke"
SMOKE_TIMEOUT = 2400


def _lock_dir() -> Path:
    return Path(tempfile.gettempdir())


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold the machine-wide lock ``name`` (one holder at a time, across processes)."""
    with _flock(_lock_dir() / f"milabench-tests-{name}.lock", fcntl.LOCK_EX):
        yield


# Workers of one session on a big machine: each of the heaviest tests (the smoke run, the
# memory estimates, three-node fleets) holds several GB of memory and both cores of a
# small machine; more workers than this only wait for each other.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the project's default, pyproject.toml): one worker more than the CPUs,
    at most `MAX_WORKERS`. Some ordinary tests wait on what is not their worker's CPU (sshd
    sessions, slurmd, the package index, a browser): with one worker a CPU a core then
    idles in stretches (docs/testing.md)."""
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0)) + 1))


def _slot_files(run: str) -> tuple[Path, Path]:
    base = _lock_dir() / f"milabench-tests-{run}"
    return Path(f"{base}.turnstile.lock"), Path(f"{base}.room.lock")


# OpenMP threads that wait for work sleep instead of spinning. The tests share the CPUs
# (two workers, torchrun's ranks, a benchmark's threads): a spinning thread burns the
# time slice a neighbour needed. Two threads of torch next to one busy process spent
# 2.5x the CPU time on the same work spinning (docs/testing.md); the default stays for
# benchmark runs outside the tests, which have their CPUs to themselves.
OPENMP_WAIT = ("OMP_WAIT_POLICY", "PASSIVE")


def configure(config: pytest.Config) -> None:
    """In the session's controller, name the run (xdist's ``--testrunuid``, which the
    workers read as ``PYTEST_XDIST_TESTRUNUID``) so that `unconfigure` can remove its lock
    files; in every process of the session, and so in everything the tests start,
    `OPENMP_WAIT` unless the caller chose a policy."""
    os.environ.setdefault(*OPENMP_WAIT)
    if not hasattr(config, "workerinput") and hasattr(config.option, "testrunuid"):
        config.option.testrunuid = config.option.testrunuid or uuid.uuid4().hex


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not getattr(config.option, "testrunuid", None):
        return
    for path in _slot_files(config.option.testrunuid):
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def machine_slot(quiet: bool) -> Iterator[None]:
    """Shared use of the machine for an ordinary test, sole use for a quiet one; nothing
    outside an xdist run."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        yield
        return
    turnstile, room = _slot_files(run)
    with _flock(turnstile, fcntl.LOCK_EX):  # no new test gets in while a quiet one waits
        handle = open(room, "a")  # noqa: SIM115 - released in the finally below
        fcntl.flock(handle, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _order(rel: str, reads_smoke: bool, quiet: bool) -> int:
    if rel in FIRST_FILES:
        return FIRST_FILES.index(rel)
    return len(FIRST_FILES) + (2 if quiet else 1 if reads_smoke else 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of `QUIET_FILES`, give the smoke run's readers its time limit, then
    order the session: `FIRST_FILES`, the ordinary files, the files reading the smoke
    run, the files holding a quiet test last. A quiet test waits for the other worker's
    test to end, so it must not start while a long first file still runs; and under
    ``--dist loadfile`` a file is handed out whole, where its first test stands. The order
    within each part is kept, and xdist hands files to the workers in this order."""
    root = Path(str(config.rootpath))
    rel_of: dict[str, str] = {}
    quiet_files: set[str] = set()
    smoke_files: set[str] = set()
    for item in items:
        try:
            rel = Path(str(item.path)).resolve().relative_to(root).as_posix()
        except ValueError:
            rel = ""
        if rel in QUIET_FILES:
            item.add_marker(QUIET)
        if item.get_closest_marker(QUIET) is not None:
            quiet_files.add(rel)
        if SMOKE_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(SMOKE_TIMEOUT), append=False)
            item.add_marker(pytest.mark.slow)
            smoke_files.add(rel)
        rel_of[item.nodeid] = rel
    items.sort(
        key=lambda item: _order(rel := rel_of[item.nodeid], rel in smoke_files, rel in quiet_files)
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Keep the order of `pytest_collection_modifyitems` under ``--dist loadfile``: xdist
    would otherwise hand out the files with the most tests first."""
    if hasattr(session.config.option, "loadscopereorder"):
        session.config.option.loadscopereorder = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with machine_slot(quiet=item.get_closest_marker(QUIET) is not None):
        return (yield)
