"""Is a benchmark's environment ready to run it? The check `milabench run` hands to the
executor (`run_suite(check_environment=...)`) before each benchmark starts.

The executor knows nothing of environments: the command line passes `ensure_ready`, so
the layers keep pointing one way (envs -> execute, never the reverse).
"""

from __future__ import annotations

from pathlib import Path

from milabench.config.commands import entry_command
from milabench.config.entry import Entry
from milabench.envs import describe_failure, driver, is_installed, read_failure
from milabench.envs.helperlib import refresh_helpers, site_packages
from milabench.errors import EnvironmentMissing


def ensure_ready(entry: Entry) -> None:
    """The benchmark's venv exists and finished installing, unless it runs in the
    current environment; its copies of benchkit and benchshared are refreshed.
    `EnvironmentMissing` otherwise, with why the last install failed (its record beside
    the environment: host, step, cause) and the command that fixes it."""
    if entry.use_current_env:
        return
    venv = entry.venv
    failed = read_failure(venv)
    why = f": {describe_failure(failed)}" if failed else ""
    if not (venv / "bin" / "python").exists():
        raise EnvironmentMissing(
            f"{entry.name}: environment {venv} is missing{why}; "
            f"run `{entry_command('install', entry)}` first"
        )
    if not is_installed(venv):
        raise EnvironmentMissing(
            f"{entry.name}: environment {venv} did not finish installing{why}; "
            f"run `{entry_command('install', entry)}` again"
        )
    refresh_copies(venv)
    check_driver(entry.name, venv)


def check_driver(name: str, venv: Path) -> None:
    """The installed CUDA runtime against the driver of this machine (NVIDIA only)."""
    from milabench.machine.accelerators import detect

    found = detect()
    if found.arch != "cuda":
        return
    try:
        need = driver.required_by_venv(site_packages(venv))
    except FileNotFoundError:
        return
    driver.check(need, found.system_info(), f"{name}: environment {venv}")


def refresh_copies(venv: Path) -> None:
    """The environment's copies of benchkit and benchshared must be this milabench's.

    benchkit writes the records (window, rates, stop) that the report interprets and
    benchshared builds the models and data that are measured; after a ``git pull``
    without ``milabench install``, a stale copy would measure old code and the report
    would misread it. Copying is a few milliseconds (`helperlib.refresh_helpers`).
    """
    try:
        refresh_helpers(venv)
    except OSError:
        return  # read-only or unusual environment: the install marker still vouches for it
