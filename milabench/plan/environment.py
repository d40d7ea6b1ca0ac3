"""The environment variables every prepare and run process of a benchmark gets.

One function, used by every plan layer, by `milabench dev` and by prepare, so that a
benchmark sees exactly the same variables however it was started (spec phases.md
section 3). Only the *added* variables are returned; the runner merges them over the
orchestrator's own environment (the data channel variable ``DATA_FD`` is the runner's).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

# arch -> (variable, how one device index is written)
SELECTION_VARIABLES: dict[str, tuple[str, str]] = {
    "cuda": ("CUDA_VISIBLE_DEVICES", "{}"),
    "rocm": ("ROCR_VISIBLE_DEVICES", "{}"),
    "xpu": ("ONEAPI_DEVICE_SELECTOR", "level_zero:{}"),
    "hpu": ("HABANA_VISIBLE_MODULES", "{}"),
}


def selection_variable(arch: str | None) -> str | None:
    """Name of the variable that restricts a process to some devices (None on cpu)."""
    found = SELECTION_VARIABLES.get(str(arch or "cpu"))
    return found[0] if found else None


def selection_value(arch: str | None, devices: Iterable[int]) -> str | None:
    """Value of the selection variable for these device indices (None on cpu)."""
    found = SELECTION_VARIABLES.get(str(arch or "cpu"))
    if not found:
        return None
    devices = [int(d) for d in devices]
    if arch == "xpu":
        return "level_zero:" + ",".join(str(d) for d in devices)
    return ",".join(found[1].format(d) for d in devices)


def gpu_count(system: dict) -> int:
    """Accelerators visible on this node according to the resolved system."""
    if str(system.get("arch") or "cpu") == "cpu":
        return 0
    try:
        return int((system.get("gpu") or {}).get("count") or 0)
    except (TypeError, ValueError):
        return 0


def device_indices(system: dict) -> list[int]:
    """Indices of the visible accelerators (empty on a CPU-only node)."""
    return list(range(gpu_count(system)))


def cpu_per_gpu(entry: dict, system: dict) -> int:
    """`{cpu_per_gpu}`: from H1's placeholder table when available, same rule otherwise."""
    try:
        from milabench.config.placeholders import placeholder_values
    except ImportError:
        placeholder_values = None
    if placeholder_values is not None:
        try:
            value = placeholder_values(entry, system).get("cpu_per_gpu")
            if value is not None:
                return max(int(value), 1)
        except Exception:  # a half-written config engine must not break every run
            pass
    options = system.get("options") or {}
    cpu_opts = options.get("cpu") or {}
    total = cpu_opts.get("total_count") or (system.get("cpu") or {}).get("count")
    total = int(total or os.cpu_count() or 1) - int(cpu_opts.get("reserved_cores") or 0)
    return max(total // max(gpu_count(system), 1), 1)


def venv_bin(entry: dict) -> Path:
    """The folder holding the benchmark's python/voir/torchrun executables."""
    if entry.get("use_current_env"):
        return Path(sys.executable).parent
    return Path((entry.get("dirs") or {}).get("venv") or sys.prefix) / "bin"


def benchmark_env(entry: dict, system: dict, device: int | None = None) -> dict[str, str]:
    """Variables added for one process of ``entry`` (restricted to ``device`` if given).

    With ``device=None`` the selection variable lists every visible device (njobs, the
    torchrun launcher); on a CPU-only node it is not set at all. The entry's own ``env``
    comes last so a suite can override anything.
    """
    dirs = entry.get("dirs") or {}
    env: dict[str, str] = {}
    for key in ("base", "venv", "data", "cache", "extra", "runs"):
        if dirs.get(key) is not None:
            env[f"MILABENCH_DIR_{key.upper()}"] = str(dirs[key])
    env["MILABENCH_CONFIG"] = json.dumps(entry, default=str)
    cache = dirs.get("cache")
    if cache:
        env["XDG_CACHE_HOME"] = str(cache)
        env["TORCH_HOME"] = str(Path(cache) / "torch")
        env["HF_HOME"] = str(Path(cache) / "huggingface")
    env["OMP_NUM_THREADS"] = str(cpu_per_gpu(entry, system))
    env["PYTHONUNBUFFERED"] = "1"

    arch = str(system.get("arch") or "cpu")
    variable = selection_variable(arch)
    if variable is not None:
        devices = [device] if device is not None else device_indices(system)
        if devices:
            env[variable] = selection_value(arch, devices) or ""

    bindir = venv_bin(entry)
    env["PATH"] = os.pathsep.join([str(bindir), os.environ.get("PATH", os.defpath)])
    if not entry.get("use_current_env"):
        env["VIRTUAL_ENV"] = str(bindir.parent)

    for key, value in (entry.get("env") or {}).items():
        if value is None:
            continue
        env[str(key)] = value if isinstance(value, str) else json.dumps(value)
    return env
