"""The two tiers of the test suite: a portable tier that ``python -m pytest`` runs, and the
system tier that runs on request (``--system``) and under CI (``CI=true``).

A test is in the **system tier** when it needs root, a system tool (`systemtools.require`),
a service (sshd nodes, Slurm, PostgreSQL, headless Chromium, tmux), the network at test
time (installs from the package index, the smoke suite), or measures rates and time on
the machine (the ``quiet`` and ``alone`` tests of tests/concurrency.py). It is put there by

* its path: a folder or file of `SYSTEM_PATHS`, or one test of it (``path::name``, every
  parametrization of that test), unless its file is in `PORTABLE_PATHS`;
* a fixture it uses, directly or through another fixture: `SYSTEM_FIXTURES`;
* the ``quiet`` or ``alone`` marker (or a file of ``QUIET_FILES``/``ALONE_FILES``);
* the ``system`` marker (``@pytest.mark.system``, or ``pytestmark`` in the file).

Every such test gets the ``system`` marker, so ``-m system`` / ``-m "not system"`` select a
tier. Without the system tier each is skipped before any fixture is set up (so nothing is
installed or started), with one reason saying how to run them, and the session ends with
one line counting them. Every other test is **portable**: it needs no root, no network,
no installs, no services and no cgroups, and it starts on macOS as on Linux; in the
portable tier `systemtools.require` and `systemtools.install` fail the test instead of
touching the machine, naming this module.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import systemtools

SYSTEM = "system"
OPTION = "--system"

# Folders (ending in "/"), files, and single tests (``file::test``) of the system tier.
SYSTEM_PATHS = (
    "tests/remote/",  # real sshd nodes on loopback, logged in as root
    "tests/fleet/",  # three sshd nodes under CPU quotas
    "tests/slurm/",  # a real one-node Slurm cluster (munged, slurmctld, slurmd)
    "tests/ci/test_quiet_rule.py",  # the idle CPU group: cgroups
    "tests/dashboard/test_dashboard.py",  # tmux
    "tests/envs/test_bundle.py",  # network namespaces (root, ip)
    "tests/envs/test_pins_reproduce.py",  # resolves against PyPI
    "tests/envs/test_real_packages.py",  # installs real packages from the index
    "tests/test_everyday.py::test_zsh_completion",  # zsh
    "tests/ci/test_workflow.py",  # systemd-analyze; real paced runs compared (quiet)
    # The benchmarks' own workloads: tiny models under torch and torchrun, one process
    # importing torch (often transformers) per run, the memory estimates on the meta
    # device, the smoke suite's installs: about 450 s of CPU of the portable tier before.
    "tests/benchmarks/",
    # Real runs too slow for the fast loop: a whole voir run per step mode, the first-light
    # script under its wall-clock budget, the perf script, the models built for estimates.
    "tests/benchkit/test_step_mode_voir.py",
    "tests/benchkit/test_harness.py::test_harness_smoke_run",
    "tests/benchkit/test_memory.py::test_the_llm_estimate_from_shallow_copies_is_the_whole_models",
    "tests/benchkit/test_memory.py::test_the_vit_estimates_from_shallow_copies_are_the_whole_models",
    "tests/scripts/test_first_light.py",
    "tests/scripts/test_perf_thirdparty.py",
)

# Files of the folders above that stay portable (the suites' configuration, no workload).
PORTABLE_PATHS = (
    "tests/benchmarks/test_suites.py",
    "tests/benchmarks/test_standard_suite.py",
)

# Fixtures that install, start a service or use the network: a test using one (directly
# or through another fixture) is in the system tier.
SYSTEM_FIXTURES = frozenset(
    {
        "chromium",  # headless Chromium (installed with apt-get when missing)
        "smoke",  # the standard smoke suite: installs every group from the index
        "ssh_cluster",  # loopback sshd nodes (tests/remote)
        "fleet_cluster",  # loopback sshd nodes (tests/fleet)
        "slurm_cluster",  # munged, slurmctld, slurmd
        "postgres",  # a PostgreSQL server
        "real_env",  # this machine's pip settings: the real package index
        "tmpfs",  # mounts a tmpfs: root (tests/execute/test_machine_faults.py)
    }
)

SKIP_REASON = (
    "system tier (root, system tools, services, network or rate measurements): "
    "run it with `python -m pytest --system` (docs/testing.md)"
)


def addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        action="store_true",
        default=False,
        help="also run the system tier: tests that need root, system tools (installed with "
        "apt-get when missing), services, the network or a quiet machine (implied by CI=true)",
    )


def selected(config: pytest.Config) -> bool:
    """Whether this session runs the system tier: ``--system``, or CI (``CI=true``)."""
    return bool(config.getoption(OPTION, default=False)) or systemtools.strict()


def configure(config: pytest.Config) -> None:
    systemtools.portable_only = None if selected(config) else "tests/tiers.py"


def _relpath(item: pytest.Item, root: Path) -> str:
    try:
        return Path(str(item.path)).resolve().relative_to(root).as_posix()
    except ValueError:
        return ""


def in_system_tier(item: pytest.Item, rel: str, quiet_files: frozenset[str]) -> bool:
    if item.get_closest_marker(SYSTEM) is not None:
        return True
    if any(item.get_closest_marker(name) is not None for name in ("quiet", "alone")):
        return True
    if rel in quiet_files:
        return True
    name = getattr(item, "originalname", item.name)
    for path in () if rel in PORTABLE_PATHS else SYSTEM_PATHS:
        if path.endswith("/") and rel.startswith(path):
            return True
        if path == rel or path == f"{rel}::{name}":
            return True
    return not SYSTEM_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def mark_items(config: pytest.Config, items: list[pytest.Item], quiet_files: frozenset[str]):
    """Give every test of the system tier the ``system`` marker."""
    root = Path(str(config.rootpath))
    for item in items:
        if in_system_tier(item, _relpath(item, root), quiet_files):
            if item.get_closest_marker(SYSTEM) is None:
                item.add_marker(SYSTEM)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a system test before its fixtures are set up, from this one line: pytest's
    summary (``-rs``) folds the skips into one line that counts them."""
    if item.get_closest_marker(SYSTEM) is not None and not selected(item.config):
        pytest.skip(SKIP_REASON)
