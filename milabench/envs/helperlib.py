"""Make ``benchkit`` importable inside a benchmark environment.

benchkit is standard-library only, so it is simply copied into the environment's
``site-packages`` (no pip, no dependency of the orchestrator comes with it). A copy
rather than a link keeps the environment self-contained (it can be shipped to another
node or into a container); the input hash includes benchkit's content, so an edited
benchkit makes the next install refresh the copy.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from milabench.envs.marker import BENCHKIT_DIR


def site_packages(venv: Path) -> Path:
    """``<venv>/lib/pythonX.Y/site-packages`` of an environment made with this interpreter."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    path = venv / "lib" / version / "site-packages"
    if path.is_dir():
        return path
    found = sorted(venv.glob("lib/python*/site-packages"))
    if found:
        return found[0]
    raise FileNotFoundError(f"{venv}: no site-packages folder (not a virtual environment?)")


def install_benchkit(venv: Path, source: Path = BENCHKIT_DIR) -> Path:
    """Replace ``<site-packages>/benchkit`` with a fresh copy of ``source``."""
    target = site_packages(venv) / "benchkit"
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target
