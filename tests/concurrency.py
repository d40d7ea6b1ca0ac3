"""Running the tests on parallel workers (pytest-xdist, ``-n auto`` in the README's
command: `pytest_xdist_auto_num_workers`) without one test disturbing another.

* **Quiet tests take the CPUs first.** A test that measures the machine (rates compared
  across nodes or runs, wall-clock bounds) is marked ``quiet``. The ordinary tests run in
  an idle CPU group (tests/cpuclass.py) and a quiet test in the foreground: it gets the
  CPUs it wants, the ordinary tests take the rest. Quiet tests run one at a time. The
  files of `QUIET_FILES` (all their tests quiet) form one lane, handed to one worker at
  the start of the session (`LaneScheduling`); a test marked ``@pytest.mark.quiet`` in
  another file runs with its file.
* **Alone tests run alone.** A test that watches the other processes of the machine (a
  CPU hog that must be the only neighbour) is marked ``alone`` (`ALONE_FILES` or
  ``@pytest.mark.alone``): while it runs (setup, call, teardown) no other test runs on any
  worker, and it waits for the running ones to end. Files holding one run last. Without
  an idle group (no writable cgroup v1 ``cpu`` controller) the quiet tests run alone too,
  at the end of the session.
* **Ordering.** The smoke run's file first, then within each part (the lane, the
  ordinary files, the files reading the shared smoke run (the ``smoke`` fixture) after
  the other ordinary ones, the alone files) the longest files first (`COSTS_FILE`).
* **OpenMP threads sleep when they wait** (`OPENMP_WAIT`): every process of the session
  and everything it starts gets ``OMP_WAIT_POLICY=PASSIVE`` unless it was set.
* **One apt-get at a time** (`machine_lock`): dpkg takes a lock of its own and a second
  install fails at once instead of waiting.

The rules are `fcntl.flock` locks on files of the temporary folder shared by the workers
of one run (``PYTEST_XDIST_TESTRUNUID``): a lock held by the quiet or alone test running,
and a readers-writer lock that an alone test takes whole, with a turnstile so that an
alone test waiting for the others is not passed by the next test of another worker.
Without xdist nothing is locked (a single process runs one test at a time anyway).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import cpuclass
import pytest

try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # without xdist: one process, nothing to schedule
    LoadFileScheduling = object  # type: ignore[assignment,misc]

# Test files whose every test measures or bounds time on the real machine: the quiet
# lane, run by one worker from the start of the session.
QUIET_FILES = frozenset(
    {  # files with a few such tests mark those tests instead (@pytest.mark.quiet)
        "tests/benchkit/test_device_events.py",  # live rates within a 1.5 s window
        "tests/benchkit/test_distributed.py",  # a window of 1.5 s across two ranks
        "tests/benchkit/test_thirdparty_suite.py",  # three rates within a 1.5 s window
        "tests/ci/test_workflow.py",  # a planted regression found on real runs
        "tests/execute/test_cli_run_timed.py",  # a signal's grace, a timeout, a gap
        "tests/execute/test_runner.py",
        "tests/execute/test_stress.py",
        "tests/fleet/test_fleet_rates.py",  # the nodes' rates compared
        "tests/history/test_history_cli.py",  # change points on real paced runs
        "tests/history/test_site.py",  # the same runs (nightly_runs.py)
        "tests/report/test_real_runs.py",  # A/B of real runs
        "tests/scripts/test_emulated_hosts.py",
    }
)
# Test files whose every test watches the machine's other processes.
ALONE_FILES = frozenset(
    {
        "tests/doctor/test_interference_run.py",  # the hog must be the only neighbour
    }
)

# The file that makes the shared smoke run (every standard entry installed and run, the
# session's longest file): handed out first.
SMOKE_FILE = "tests/benchmarks/test_standard_smoke.py"
# Seconds a worker spent on each test file, measured (scripts/test_costs.py): within each
# part of the session the longest files start first, so that each overlaps the rest of
# the suite on the other workers instead of ending it alone (longest processing time
# first).
# ``MILABENCH_TEST_COSTS=<file>`` reads another table (one measured on another machine).
COSTS_FILE = Path(__file__).with_name("file_costs.json")
COSTS_ENV = "MILABENCH_TEST_COSTS"

# The early-stop grace (``MILABENCH_RUN_EARLY_STOP_GRACE``) of the runs of ordinary
# tests: a stopped benchmark leaves by itself at once, the grace only bounds one that does
# not, and an ordinary test may wait seconds for a CPU while a quiet test has them.
STOP_GRACE = "10"

QUIET = "quiet"
ALONE = "alone"
LANE = "quiet-lane"  # the scope of every test of QUIET_FILES (`LaneScheduling`)
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
    return max(1, min(MAX_WORKERS, usable_cpus() + 1))


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity where the system has one (Linux),
    else the machine's count (macOS has no ``sched_getaffinity``)."""
    if (affinity := getattr(os, "sched_getaffinity", None)) is not None:
        return len(affinity(0))
    return os.cpu_count() or 1


def _slot_files(run: str) -> tuple[Path, Path, Path]:
    base = _lock_dir() / f"milabench-tests-{run}"
    return Path(f"{base}.quiet.lock"), Path(f"{base}.turnstile.lock"), Path(f"{base}.room.lock")


# OpenMP threads that wait for work sleep instead of spinning. The tests share the CPUs
# (two workers, torchrun's ranks, a benchmark's threads): a spinning thread burns the
# time slice a neighbour needed. Two threads of torch next to one busy process spent
# 2.5x the CPU time on the same work spinning (docs/testing.md); the default stays for
# benchmark runs outside the tests, which have their CPUs to themselves.
OPENMP_WAIT = ("OMP_WAIT_POLICY", "PASSIVE")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _parallel(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not getattr(
        config.option, "collectonly", False
    )


# Whether this session runs the system tier (tests/tiers.py), where the quiet and alone
# tests are: without it they are skipped, and no CPU group is made nor any slot taken.
_system_tier = False


def configure(config: pytest.Config, system_tier: bool = True) -> None:
    """In the session's controller, name the run (xdist's ``--testrunuid``, which the
    workers read as ``PYTEST_XDIST_TESTRUNUID``) so that `pytest_unconfigure` can remove
    its lock files, and, in a session of the system tier (``system_tier``), make the
    idle CPU group of the run (tests/cpuclass.py) when it has workers, unless
    ``MILABENCH_TEST_BACKGROUND=off``; in a worker, join that group; in every process of
    the session, and so in everything the tests start, `OPENMP_WAIT` unless the caller
    chose a policy. The portable tier makes no CPU group and reads nothing of Linux.
    (``system_tier`` defaults to True for a conftest that uses this as its
    ``pytest_configure``, as tests/ci/test_quiet_rule.py does.)"""
    global _system_tier
    _system_tier = system_tier
    os.environ.setdefault(*OPENMP_WAIT)
    if not system_tier:
        return
    if _is_worker(config):
        cpuclass.join_background()
        return
    if os.environ.get(cpuclass.ENV) != cpuclass.OFF:
        os.environ.pop(cpuclass.ENV, None)  # a session started by a test makes its own
    if hasattr(config.option, "testrunuid"):
        config.option.testrunuid = config.option.testrunuid or uuid.uuid4().hex
        if _parallel(config) and os.environ.get(cpuclass.ENV) != cpuclass.OFF:
            cpuclass.make_background(config.option.testrunuid)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_worker(config) or not getattr(config.option, "testrunuid", None):
        return
    for path in _slot_files(config.option.testrunuid):
        path.unlink(missing_ok=True)
    if (group := cpuclass.background()) is not None:
        cpuclass.remove_background(group)


def _kind(item: pytest.Item) -> str:
    if not _system_tier:  # the quiet and alone tests are skipped: nothing to keep apart
        return ""
    if item.get_closest_marker(ALONE) is not None:
        return ALONE
    if item.get_closest_marker(QUIET) is not None:
        return QUIET if cpuclass.background() is not None else ALONE
    return ""


@contextlib.contextmanager
def machine_slot(kind: str) -> Iterator[None]:
    """An ordinary test (``kind`` "") shares the machine; a `QUIET` one runs in the
    foreground, one at a time, beside the ordinary ones; an `ALONE` one has the machine
    to itself. Nothing outside an xdist run, nor outside the system tier."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run or not _system_tier:
        yield
        return
    quiet, turnstile, room = _slot_files(run)
    with contextlib.ExitStack() as stack:
        if kind:
            stack.enter_context(_flock(quiet, fcntl.LOCK_EX))
        with _flock(turnstile, fcntl.LOCK_EX):  # no new test gets in while an alone waits
            handle = stack.enter_context(open(room, "a"))
            fcntl.flock(handle, fcntl.LOCK_EX if kind == ALONE else fcntl.LOCK_SH)
        stack.callback(fcntl.flock, handle, fcntl.LOCK_UN)
        if kind:
            stack.enter_context(cpuclass.foreground())
        yield


def file_costs(path: Path | None = None) -> dict[str, float]:
    """The measured seconds of the longest test files (``path``, else `COSTS_ENV`'s file,
    else `COSTS_FILE`); {} without the table."""
    path = path or Path(os.environ.get(COSTS_ENV) or COSTS_FILE)
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        return {name: float(cost["wall"]) for name, cost in files.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _order(rel: str, reads_smoke: bool, kind: str, costs: dict[str, float]) -> tuple:
    """Smoke run first, the quiet lane beside it, the ordinary files, the smoke run's
    readers, then the files holding an alone test; within each part the longest file
    first (`COSTS_FILE`), the others as collected."""
    if rel == SMOKE_FILE:
        part = 0
    elif kind == ALONE:
        part = 4
    elif rel in QUIET_FILES:
        part = 1
    else:
        part = 3 if reads_smoke else 2
    return (part, -costs.get(rel, 0.0))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of `QUIET_FILES` and `ALONE_FILES`, give the smoke run's readers its
    time limit, then order the session (`_order`). An alone test waits for the other
    workers' tests to end, so it must not start while a long first file still runs; and
    under ``--dist loadfile`` a file is handed out whole, where its first test stands.
    Without an idle CPU group the quiet tests are alone ones. The order within each part
    is kept, and xdist hands files to the workers in this order."""
    root = Path(str(config.rootpath))
    rel_of: dict[str, str] = {}
    kind_of: dict[str, str] = {}
    smoke_files: set[str] = set()
    for item in items:
        try:
            rel = Path(str(item.path)).resolve().relative_to(root).as_posix()
        except ValueError:
            rel = ""
        if rel in QUIET_FILES:
            item.add_marker(QUIET)
        if rel in ALONE_FILES:
            item.add_marker(ALONE)
        if (kind := _kind(item)) and kind_of.get(rel) != ALONE:
            kind_of[rel] = kind
        if SMOKE_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(SMOKE_TIMEOUT), append=False)
            item.add_marker(pytest.mark.slow)
            smoke_files.add(rel)
        rel_of[item.nodeid] = rel
    costs = file_costs()
    items.sort(
        key=lambda item: _order(
            rel := rel_of[item.nodeid], rel in smoke_files, kind_of.get(rel, ""), costs
        )
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Keep the order of `pytest_collection_modifyitems` under ``--dist loadfile``: xdist
    would otherwise hand out the files with the most tests first."""
    if hasattr(session.config.option, "loadscopereorder"):
        session.config.option.loadscopereorder = False


class LaneScheduling(LoadFileScheduling):
    """``--dist loadfile`` with the files of `QUIET_FILES` as one unit: one worker runs the
    quiet tests one after the other while the others run the ordinary files."""

    def _split_scope(self, nodeid: str) -> str:
        scope = super()._split_scope(nodeid)
        return LANE if scope in QUIET_FILES else scope


def pytest_xdist_make_scheduler(config: pytest.Config, log) -> LoadFileScheduling | None:
    """`LaneScheduling` where the session has an idle CPU group and ``--dist loadfile``;
    xdist's own scheduler otherwise."""
    if config.getvalue("dist") == "loadfile" and cpuclass.background() is not None:
        return LaneScheduling(config, log)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with machine_slot(_kind(item)):
        return (yield)
