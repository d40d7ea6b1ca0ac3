"""The machine metadata record (`meta` event, `milabench machine`).

Computed once per process and cached: the machine part (`milabench.machine.facts`:
CPU, memory, OS, Python, accelerators; with the tool's version and git commit, or
``MILABENCH_COMMIT`` for a copy without ``.git``) does not
change during a run. The framework part (torch version and build settings) is read from
*inside* each benchmark environment with a tiny probe that does not even start the
interpreter: ``torch/version.py`` (version, CUDA/HIP versions, git revision) is read as
data from the environment's site-packages, once per interpreter, with the build the
environment was installed as: the install variant from its marker (``cuda``, ``cuda12``,
``cpu``) and the CUDA runtime from its ``dist-info`` folders. On NVIDIA the record also
names the CUDA build chosen for the node's driver (``cuda_build``,
`milabench.machine.cudabuild`), so that runs of different builds are told apart in
reports.
"""

from __future__ import annotations

import ast
import datetime
import platform
import sys
from functools import cache
from pathlib import Path
from typing import Any

from milabench import __version__
from milabench.events import redact
from milabench.machine.facts import machine_facts, tool_commit

REPO_ROOT = Path(__file__).resolve().parents[1]


@cache
def _machine() -> dict[str, Any]:
    record = machine_facts()
    record["milabench"] = {"version": __version__, "commit": tool_commit(REPO_ROOT)}
    return record


def machine_metadata(system: dict | None = None) -> dict[str, Any]:
    """The `meta` record without the environment part (redacted)."""
    record = dict(_machine())
    record["date"] = datetime.datetime.now(datetime.UTC).isoformat()
    record["options"] = (system or {}).get("options") or {}
    return redact(record)


_env_cache: dict[str, dict[str, Any]] = {}
# The install marker's name (`milabench.envs.MARKER_NAME`; a test checks they agree): envs
# sits above this module, so the name is repeated rather than imported.
INSTALL_MARKER = "milabench-install.json"
_TORCH_KEYS = ("__version__", "git_version", "cuda", "hip", "xpu", "debug")


def _literal_assignments(path: Path) -> dict[str, Any]:
    """``NAME = <literal>`` lines of a Python file, read without executing it."""
    values: dict[str, Any] = {}
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in tree.body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        if isinstance(target, ast.Name):
            try:
                values[target.id] = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError):
                continue
    return values


def torch_build(version_file: Path | None) -> dict[str, Any] | None:
    """torch's version and build settings from its ``version.py`` (no import of torch)."""
    if version_file is None or not version_file.is_file():
        return None
    try:
        values = _literal_assignments(version_file)
    except (OSError, SyntaxError, ValueError) as err:
        return {"error": repr(err)}
    info = {k: values.get(k) for k in _TORCH_KEYS if k in values}
    info["version"] = info.pop("__version__", None)
    return info


def _site_packages(python: str) -> tuple[list[Path], str | None]:
    """Site folders and Python version of the environment owning ``python``."""
    if Path(python) == Path(sys.executable):
        import site

        dirs = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
        dirs += [Path(p) for p in sys.path if p.endswith("site-packages")]
        return dirs, platform.python_version()
    prefix = Path(python).parent.parent
    version = None
    cfg = prefix / "pyvenv.cfg"
    if cfg.is_file():
        for line in cfg.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() in ("version", "version_info"):
                version = value.strip()
                break
    return sorted(prefix.glob("lib/python3*/site-packages")), version


def probe_environment(python: str) -> dict[str, Any]:
    """Framework versions of the environment of ``python`` (cached per interpreter).

    Reads files instead of starting the interpreter: importing torch costs seconds and
    even a bare interpreter start costs tens of milliseconds before every benchmark.
    """
    if python in _env_cache:
        return _env_cache[python]
    dirs, version = _site_packages(python)
    info: dict[str, Any] = {"python": version, "executable": python}
    for folder in dirs:
        candidate = folder / "torch" / "version.py"
        if candidate.is_file():
            info["torch"] = torch_build(candidate)
            break
    install = install_build(Path(python).parent.parent, dirs)
    if install:
        info["install"] = install
    _env_cache[python] = info
    return info


def install_build(prefix: Path, site_dirs: list[Path]) -> dict[str, Any]:
    """The build an environment holds: ``{"variant": "cuda12", "cuda_runtime": "12.8",
    "runtime_package": "nvidia_cuda_runtime_cu12-12.8.90"}``; keys only for what is known
    (the variant from the install marker, the runtime from a dist-info folder)."""
    import json

    from milabench.machine.cudabuild import installed_runtime

    out: dict[str, Any] = {}
    try:
        marker = json.loads((prefix / INSTALL_MARKER).read_text(encoding="utf-8"))
        variant = marker["inputs"]["variant"]
        if isinstance(variant, str):
            out["variant"] = variant
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for folder in site_dirs:
        found = installed_runtime(folder)
        if found:
            (major, minor), package = found
            out["cuda_runtime"] = f"{major}.{minor}"
            out["runtime_package"] = package
            break
    return out


async def probe_environment_async(python: str) -> dict[str, Any]:
    return probe_environment(python)


def meta_record(system: dict | None, environment: dict | None) -> dict[str, Any]:
    record = machine_metadata(system)
    if (system or {}).get("cuda_build"):
        record["cuda_build"] = system["cuda_build"]
    if environment is not None:
        record["environment"] = environment
        if isinstance(environment.get("torch"), dict):
            record["torch"] = environment["torch"]
    return redact(record)


async def meta_for_entry(python: str, system: dict | None) -> dict[str, Any]:
    """The full `meta` record for a benchmark's processes run by interpreter `python`
    (the entry's ``Entry.python``; the probe is cached per interpreter)."""
    env = await probe_environment_async(python) if Path(python).exists() else None
    return meta_record(system, env)
