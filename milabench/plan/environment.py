"""The environment variables every prepare and run process of a benchmark gets.

One function, used by every plan layer, by `milabench dev` and by prepare, so that a
benchmark sees exactly the same variables however it was started (docs/phases.md
section 4). Only the *added* variables are returned; the runner merges them over the
orchestrator's own environment (the data channel variable ``DATA_FD`` is the runner's).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from milabench.config.entry import Entry, as_entry
from milabench.config.placeholders import placeholder_values

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


def inherited_devices(
    arch: str | None, environ: Mapping[str, str] | None = None
) -> list[str] | None:
    """The devices milabench itself was restricted to (``CUDA_VISIBLE_DEVICES=2,3``, MIG or
    GPU UUIDs, ``level_zero:0,1``), in order; None when the variable is not set.

    Device ``i`` of a plan is the i-th of these: a job scheduler that hands milabench GPUs
    2 and 3 must see its benchmarks on 2 and 3, never on 0 and 1.
    """
    variable = selection_variable(arch)
    env = os.environ if environ is None else environ
    if variable is None or env.get(variable) is None:
        return None
    value = env[variable]
    if arch == "xpu" and ":" in value:
        value = value.split(":", 1)[1]
    return [x.strip() for x in value.split(",") if x.strip()]


def selection_value(
    arch: str | None, devices: Iterable[int], environ: Mapping[str, str] | None = None
) -> str | None:
    """Value of the selection variable for these device indices (None on cpu), through
    the inherited restriction when there is one (`inherited_devices`)."""
    found = SELECTION_VARIABLES.get(str(arch or "cpu"))
    if not found:
        return None
    inherited = inherited_devices(arch, environ)
    ids = [
        inherited[d] if inherited is not None and d < len(inherited) else str(d)
        for d in (int(x) for x in devices)
    ]
    if arch == "xpu":
        return "level_zero:" + ",".join(ids)
    return ",".join(found[1].format(d) for d in ids)


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


def cpu_per_gpu(entry: Entry, system: dict) -> int:
    """`{cpu_per_gpu}` of the placeholder table: the threads one process may use."""
    return max(int(placeholder_values(entry, system)["cpu_per_gpu"]), 1)


def benchmark_env(
    entry: Entry | Mapping[str, Any], system: dict, device: int | None = None
) -> dict[str, str]:
    """Variables added for one process of ``entry`` (restricted to ``device`` if given).

    With ``device=None`` the selection variable lists every visible device (njobs, the
    torchrun launcher); on a CPU-only node it is not set at all. The entry's own ``env``
    comes last so a suite can override anything.
    """
    entry = as_entry(entry)
    dirs = entry.dirs
    env: dict[str, str] = {}
    for key in ("base", "venv", "data", "cache", "extra", "runs"):
        if dirs.get(key) is not None:
            env[f"MILABENCH_DIR_{key.upper()}"] = str(dirs.get(key))
    env["MILABENCH_CONFIG"] = json.dumps(dict(entry.raw), default=str)
    cache = dirs.cache
    if cache:
        env["XDG_CACHE_HOME"] = str(cache)
        env["TORCH_HOME"] = str(Path(cache) / "torch")
        env["HF_HOME"] = str(Path(cache) / "huggingface")
    env["OMP_NUM_THREADS"] = str(cpu_per_gpu(entry, system))
    # The node's accelerators as the plans count them (`gpu_count`: 0 when the arch is
    # cpu): what a prepare step sizes a data set that every rank reads by.
    env["MILABENCH_GPU_COUNT"] = str(gpu_count(system))
    env["PYTHONUNBUFFERED"] = "1"

    arch = str(system.get("arch") or "cpu")
    if arch == "cuda":
        # NVML (the monitors, the report's "GPU 3") numbers devices in PCI bus order; so
        # must CUDA, whose default order (fastest first) can differ on mixed machines.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    variable = selection_variable(arch)
    if variable is not None:
        devices = [device] if device is not None else device_indices(system)
        if devices:
            env[variable] = selection_value(arch, devices) or ""

    bindir = entry.bindir
    env["PATH"] = os.pathsep.join([str(bindir), os.environ.get("PATH", os.defpath)])
    if not entry.use_current_env:
        env["VIRTUAL_ENV"] = str(entry.venv)

    for key, value in entry.env.items():
        if value is None:
            continue
        env[str(key)] = value if isinstance(value, str) else json.dumps(value)
    return env
