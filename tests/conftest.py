"""Shared test set-up: make the small helper modules of `tests/` importable, apply the CI
rule for skips (the hooks of tests/systemtools.py), the parallel workers' rule (quiet
tests first, alone tests alone: tests/concurrency.py) and the optional CPU log
(tests/cputime.py), and find (or install) the headless Chromium the HTML tests draw pages
with."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import concurrency  # noqa: E402
import cputime  # noqa: E402
import systemtools  # noqa: E402
from concurrency import (  # noqa: E402, F401  (the hooks are registered by being here)
    pytest_collection_modifyitems,
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


def pytest_configure(config: pytest.Config) -> None:
    systemtools.pytest_configure(config)
    concurrency.configure(config)
    config.pluginmanager.register(cputime, "milabench-cputime")


@pytest.fixture(scope="session")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := find(name):
            return path
    return require("chromium")["chromium"]
