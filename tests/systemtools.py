"""The system tools the tests use, and the one rule for what happens when one is missing.

Every command a test runs that is not part of Python (rsync, sshd, Slurm, Chromium, ...)
is listed in `TOOLS` with the Debian package that provides it. A test or fixture asks for
its tools with `require`: a missing tool is installed with apt-get (one call for all
missing ones, the package lists refreshed once if that fails), so a fresh Debian machine
runs every test with nothing installed by hand.

When a tool is still missing, `unavailable` decides:

* normally the test is skipped with the reason;
* under CI (``CI`` set to ``true``/``1``/``yes``) the test fails with the reason: a skip must
  never hide a missing install step. The hooks at the end of this module (a pytest
  plugin, loaded by tests/conftest.py) apply the same rule to every other skip,
  ``importorskip`` and ``skipif`` included, at collection too.

Only `cannot_run_here` skips under CI too: it is for what this kind of machine cannot have
at all (no cgroup v1 ``cpu`` controller, no private mount namespaces, not root). Every
such reason is listed in docs/testing.md.

In the portable tier (tests/tiers.py) `require` and `install` fail the test at once: a test
that needs a system tool belongs to the system tier, which is the only one allowed to
change the machine.

``MILABENCH_TEST_INSTALL=never`` turns installs off (the missing tool is then unavailable
at once): for a machine whose packages must not change, and for the tests of this rule.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

import pytest
from concurrency import machine_lock

# Prefix of every reason given by `cannot_run_here`: the CI rule lets these skips stand.
MACHINE_PREFIX = "cannot run on this machine: "

# Where a tool may live outside a non-root PATH (sshd is in /usr/sbin).
_EXTRA_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")


@dataclass(frozen=True)
class Tool:
    """A command the tests run, and the Debian package that provides it."""

    command: str
    package: str


TOOLS: dict[str, Tool] = {
    t.command: t
    for t in (
        Tool("rsync", "rsync"),
        Tool("zsh", "zsh"),
        Tool("tmux", "tmux"),
        Tool("sshd", "openssh-server"),
        Tool("ssh", "openssh-client"),
        Tool("ssh-keygen", "openssh-client"),
        Tool("unshare", "util-linux"),
        Tool("taskset", "util-linux"),
        Tool("runuser", "util-linux"),
        Tool("mount", "mount"),
        Tool("hostname", "hostname"),
        Tool("ip", "iproute2"),
        Tool("systemd-analyze", "systemd"),
        Tool("chromium", "chromium"),
        Tool("munged", "munge"),
        Tool("munge", "munge"),
        Tool("slurmctld", "slurmctld"),
        Tool("slurmd", "slurmd"),
        Tool("sbatch", "slurm-client"),
        Tool("scontrol", "slurm-client"),
        Tool("scancel", "slurm-client"),
        Tool("sinfo", "slurm-client"),
        Tool("squeue", "slurm-client"),
    )
}

_refreshed = False

# Set by tests/tiers.py when the session runs the portable tier only (that file's path):
# then no test may ask for a system tool or install one.
portable_only: str | None = None


def strict() -> bool:
    """True under CI, where a missing tool fails the test instead of skipping it."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def find(command: str) -> str | None:
    """The tool's path, from PATH or the sbin folders; None when it is not installed."""
    found = shutil.which(command)
    if found:
        return found
    for folder in _EXTRA_DIRS:
        path = os.path.join(folder, command)
        if os.access(path, os.X_OK) and os.path.isfile(path):
            return path
    return None


def unavailable(reason: str) -> NoReturn:
    """Skip the test with ``reason``; under CI, fail it with ``reason``."""
    if strict():
        pytest.fail(f"{reason} (CI=true: a missing tool fails the run)", pytrace=False)
    pytest.skip(reason)


def cannot_run_here(reason: str) -> NoReturn:
    """Skip, under CI too: the machine itself cannot offer this (see docs/testing.md)."""
    pytest.skip(MACHINE_PREFIX + reason)


def install(packages: Iterable[str], timeout: float = 900) -> str | None:
    """apt-get install ``packages``; None on success, else why it failed."""
    global _refreshed
    packages = sorted(set(packages))
    _system_tier_only(f"apt-get install {' '.join(packages)}")
    if os.environ.get("MILABENCH_TEST_INSTALL", "").lower() == "never":
        return "installs are turned off (MILABENCH_TEST_INSTALL=never)"
    if not shutil.which("apt-get"):
        return "apt-get is not available to install it"
    sudo: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            return "apt-get needs root, and there is no sudo"
        sudo = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = [*sudo, "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    with machine_lock("apt"):  # parallel workers: dpkg's own lock fails instead of waiting
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        if proc.returncode != 0 and not _refreshed:
            _refreshed = True  # a fresh machine's package lists may be empty or stale
            update = [*sudo, "apt-get", "update", "-q"]
            subprocess.run(update, capture_output=True, env=env, timeout=timeout)
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        return f"apt-get install {' '.join(packages)} failed: {proc.stderr.strip()[-300:]}"
    return None


def tool(spec: str | Tool) -> Tool:
    if isinstance(spec, Tool):
        return spec
    try:
        return TOOLS[spec]
    except KeyError:
        raise KeyError(f"{spec!r} is not in tests/systemtools.py TOOLS: add it there") from None


def _system_tier_only(what: str) -> None:
    """Fail a portable test that asks for a system tool: it belongs to the system tier."""
    if portable_only:
        pytest.fail(
            f"{what}: a test that needs system tools is in the system tier; add it to "
            f"{portable_only} SYSTEM_PATHS (or mark it system)",
            pytrace=False,
        )


def require(*specs: str | Tool) -> dict[str, str]:
    """Every tool's path, installing the missing ones first; `unavailable` if one is still
    missing. Names come from `TOOLS`; a `Tool` may be given for a one-off."""
    tools = [tool(s) for s in specs]
    _system_tier_only(", ".join(t.command for t in tools))
    missing = [t for t in tools if find(t.command) is None]
    why = install(t.package for t in missing) if missing else None
    still = [t for t in missing if find(t.command) is None]
    if still:
        names = ", ".join(f"{t.command} (Debian package {t.package})" for t in still)
        unavailable(f"{names} not installed: {why or 'installed, but not found on PATH'}")
    return {t.command: find(t.command) or "" for t in tools}


def require_root(what: str) -> None:
    """The test needs root (sshd logging in as the current user, cgroups, daemons)."""
    if os.geteuid() != 0:
        cannot_run_here(f"{what} needs root")


def ci_verdict(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Under CI, turn a skip (other than `cannot_run_here`) into a failure, in place."""
    if not (strict() and report.skipped) or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    if reason.startswith(MACHINE_PREFIX):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true, which allows no skip for a missing tool: {reason}"


def pytest_configure(config: pytest.Config) -> None:
    # Under CI a module skipped at collection becomes a collection error: the other
    # modules still run, and the run still fails.
    if strict():
        config.option.continue_on_collection_errors = True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    ci_verdict(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    ci_verdict(outcome.get_result())
