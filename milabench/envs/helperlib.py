"""Make the helper packages importable inside every benchmark environment.

Two packages, both standard-library only at import time, go into every environment:
``benchkit`` (the measuring library, beside ``milabench``) and ``benchshared`` (model and
data code several benchmarks share, ``benchmarks/_shared/benchshared`` in a clone,
beside ``milabench`` when installed from a wheel). Each is copied into the environment's
``site-packages`` (no pip, no dependency of the orchestrator comes with it). A copy
rather than a link keeps the environment self-contained (it can be shipped to another
node or into a container); the input hash holds each package's content hash
(`source_hashes`), so an edited helper makes the next install refresh the copies, and
`refresh_helpers` replaces a stale copy before a run.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import sys
from pathlib import Path

#: the folder holding ``milabench`` and ``benchkit``: a clone, or ``site-packages``
TOOL_ROOT = Path(__file__).resolve().parents[2]
SHARED_IN_CLONE = Path("benchmarks") / "_shared" / "benchshared"


def helper_sources(root: Path = TOOL_ROOT) -> dict[str, Path]:
    """``{package name: source folder}`` of every package copied into an environment.

    benchshared is looked up in the clone's ``benchmarks/_shared`` first, then beside
    ``milabench`` (a wheel install puts it there); a missing folder is an error naming
    both places, since every benchmark environment needs it."""
    shared = root / SHARED_IN_CLONE
    if not shared.is_dir():
        shared = root / "benchshared"
    if not (shared / "__init__.py").is_file():
        raise FileNotFoundError(
            f"benchshared not found: neither {root / SHARED_IN_CLONE} nor {root / 'benchshared'}"
        )
    return {"benchkit": root / "benchkit", "benchshared": shared}


def package_hash(folder: Path) -> str:
    """Hash of a package's Python sources (relative names and contents)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def source_hashes(sources: dict[str, Path] | None = None) -> dict[str, str]:
    """``{package name: content hash}`` of the helper sources (read now, never cached:
    the install's input hash must see an edit made a moment ago)."""
    found = helper_sources() if sources is None else sources
    return {name: package_hash(folder) for name, folder in found.items()}


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


def install_package(venv: Path, name: str, source: Path) -> Path:
    """Replace ``<site-packages>/<name>`` with a fresh copy of ``source``."""
    target = site_packages(venv) / name
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def install_helpers(venv: Path, sources: dict[str, Path] | None = None) -> list[Path]:
    """Copy every helper package into the environment; returns the copies."""
    found = helper_sources() if sources is None else sources
    return [install_package(venv, name, folder) for name, folder in found.items()]


def refresh_helpers(venv: Path, sources: dict[str, Path] | None = None) -> list[str]:
    """Re-copy each helper whose copy in ``venv`` differs from its source; returns their
    names. Without ``sources``, the source hashes are computed once per process (a run
    checks every benchmark's environment against the same code)."""
    if sources is None:
        sources, hashes = helper_sources(), _current_hashes()
    else:
        hashes = source_hashes(sources)
    stale = []
    for name, folder in sources.items():
        copy = site_packages(venv) / name
        if copy.is_dir() and package_hash(copy) == hashes[name]:
            continue
        install_package(venv, name, folder)
        stale.append(name)
    return stale


@functools.cache
def _current_hashes() -> dict[str, str]:
    return source_hashes()
