"""Shared test set-up: make the small helper modules of `tests/` importable, split the
tests into the portable tier and the system tier (tests/tiers.py: ``--system`` or
``CI=true`` runs both), apply the CI rule for skips (the hooks of tests/systemtools.py),
the parallel workers' rule for the system tier (quiet tests first, alone tests alone:
tests/concurrency.py) and the optional CPU log (tests/cputime.py), and find (or
install) the headless Chromium the HTML tests draw pages with."""

import os
import sys
from pathlib import Path

import pytest

# Each pytest process rewrites the asserts of every test module it collects (about 8 s of
# CPU for this suite) and compiles our helpers; with PYTHONDONTWRITEBYTECODE set (common
# in containers, and on the CI machine) nothing of it was cached, so every worker, every
# session, paid again: collecting took 17 s of CPU instead of 9. The caches go to the
# checkout's own __pycache__ folders (ignored by git); what the tests start keeps the
# caller's setting.
sys.dont_write_bytecode = False
sys.path.insert(0, str(Path(__file__).parent))
# One thread per process a test starts, unless the caller chose (and `milabench` run by
# tests/clirun.py gets the `cpu.total_count` option of 1, so its benchmarks get one too).
# Three workers keep both CPUs of a small machine busy, and a torch process of two
# threads then waits in every parallel region for a peer that is not scheduled: with two
# CPU hogs beside it, a matmul loop took 1.48 s of CPU on two threads against 1.04 s on
# one, with OMP_WAIT_POLICY=PASSIVE (tests/concurrency.py; 2.55 s spinning). No test
# measures a thread's speed-up (docs/testing.md, "Shared CPUs").
os.environ.setdefault("OMP_NUM_THREADS", "1")

import concurrency  # noqa: E402
import cputime  # noqa: E402
import systemtools  # noqa: E402
import tiers  # noqa: E402
from concurrency import (  # noqa: E402, F401  (the hooks are registered by being here)
    pytest_runtest_protocol,
    pytest_sessionstart,
    pytest_unconfigure,
    pytest_xdist_auto_num_workers,
    pytest_xdist_make_scheduler,
)
from systemtools import (  # noqa: E402, F401  (the hooks are registered by being here)
    find,
    pytest_make_collect_report,
    pytest_runtest_makereport,
    require,
)
from tiers import pytest_runtest_setup  # noqa: E402, F401


def pytest_addoption(parser: pytest.Parser) -> None:
    tiers.addoption(parser)


def pytest_configure(config: pytest.Config) -> None:
    systemtools.pytest_configure(config)
    tiers.configure(config)
    concurrency.configure(config, system_tier=tiers.selected(config))
    config.pluginmanager.register(cputime, "milabench-cputime")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    concurrency.pytest_collection_modifyitems(config, items)
    tiers.mark_items(config, items, concurrency.QUIET_FILES | concurrency.ALONE_FILES)


@pytest.fixture(scope="session")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := find(name):
            return path
    return require("chromium")["chromium"]
