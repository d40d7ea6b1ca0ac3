"""Does the NVIDIA driver support the CUDA runtime the pinned wheels bring?

A torch wheel built for CUDA 13 on a driver that supports CUDA 12.4 at most installs
fine and then fails at the first kernel with "CUDA driver version is insufficient",
minutes into a run, or worse, torch silently reports no GPU. The CUDA runtime a build
needs is pinned in its requirement files (``nvidia-cuda-runtime==13.0.96``, or the older
``nvidia-cuda-runtime-cu12==12.4.127``) and recorded in an installed environment's
``*.dist-info`` folders; the driver's ceiling comes from NVML. `milabench install` checks
the pins before installing, and `milabench run` checks what is installed, each with one
line naming both versions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from milabench.errors import EnvironmentMissing

# nvidia-cuda-runtime==13.0.96 / nvidia-cuda-runtime-cu12==12.4.127 (pins and dist-info names)
_PIN = re.compile(r"^\s*nvidia[-_]cuda[-_]runtime(?:[-_]cu\d+)?\s*==\s*(\d+)\.(\d+)", re.I)
_DIST = re.compile(r"^nvidia_cuda_runtime(?:_cu\d+)?-(\d+)\.(\d+)[^/]*\.dist-info$", re.I)


def required_by_pins(files: Iterable[Path]) -> tuple[tuple[int, int], str] | None:
    """The CUDA runtime ``(major, minor)`` the first pinning file requires, and its line."""
    for path in files:
        if not Path(path).is_file():
            continue
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            found = _PIN.match(line)
            if found:
                return (int(found.group(1)), int(found.group(2))), line.strip()
    return None


def required_by_venv(site_packages: Path) -> tuple[tuple[int, int], str] | None:
    """The CUDA runtime installed in an environment (from its dist-info folder name)."""
    try:
        names = sorted(p.name for p in Path(site_packages).iterdir())
    except OSError:
        return None
    for name in names:
        found = _DIST.match(name)
        if found:
            return (int(found.group(1)), int(found.group(2))), name.removesuffix(".dist-info")
    return None


def driver_cuda(system_info: dict) -> tuple[int, int] | None:
    """The highest CUDA version the driver supports (NVML's 12040 -> (12, 4))."""
    value = system_info.get("cuda_driver_version")
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number // 1000, (number % 1000) // 10


def check(need: tuple[tuple[int, int], str] | None, system_info: dict, what: str) -> None:
    """`EnvironmentMissing` (one line) when the driver is older than `need` requires."""
    have = driver_cuda(system_info)
    if need is None or have is None or have >= need[0]:
        return
    (major, minor), source = need
    driver = system_info.get("driver_version") or "?"
    raise EnvironmentMissing(
        f"{what}: the CUDA {major}.{minor} runtime ({source}) needs a newer NVIDIA driver "
        f"than {driver}, which supports CUDA {have[0]}.{have[1]} at most; update the "
        "driver, or pin a torch build for that CUDA version (docs/environments.md)"
    )
