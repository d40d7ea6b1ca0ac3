"""Does the NVIDIA driver run the CUDA runtime the pinned wheels bring?

A torch wheel built for CUDA 13 on a driver that supports CUDA 12.4 at most installs
fine and then fails at the first kernel with "CUDA driver version is insufficient",
minutes into a run, or worse, torch silently reports no GPU. The CUDA runtime a build
needs is pinned in its requirement files (``nvidia-cuda-runtime==13.0.96``, or
``nvidia-cuda-runtime-cu12==12.8.90``) and recorded in an installed environment's
``*.dist-info`` folders; the driver's ceiling comes from NVML. `milabench install` checks
the pins before installing, and `milabench run` checks what is installed, each with one
line naming both versions.

The rule is the one `milabench.machine.cudabuild` chooses builds with (CUDA minor-version
compatibility): a runtime of CUDA M.m runs on a driver whose ceiling is M.x or later.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from milabench.errors import ConfigError, EnvironmentMissing
from milabench.machine.cudabuild import FIRST_DRIVER, driver_cuda, installed_runtime

# nvidia-cuda-runtime==13.0.96 / nvidia-cuda-runtime-cu12==12.8.90 (pinned lines)
_PIN = re.compile(r"^\s*nvidia[-_]cuda[-_]runtime(?:[-_]cu\d+)?\s*==\s*(\d+)\.(\d+)", re.I)

__all__ = ["check", "driver_cuda", "install_check", "required_by_pins", "required_by_venv"]


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
    return installed_runtime(site_packages)


def check(need: tuple[tuple[int, int], str] | None, system_info: dict, what: str) -> None:
    """`EnvironmentMissing` (one line) when the driver cannot run the runtime `need` names:
    its CUDA major version is older (minor versions are compatible, see module doc)."""
    have = driver_cuda(system_info)
    if need is None or have is None or have[0] >= need[0][0]:
        return
    (major, minor), source = need
    driver = system_info.get("driver_version") or "?"
    floor = FIRST_DRIVER.get(major)
    needs = f"NVIDIA driver {floor} or newer" if floor else f"a CUDA {major} driver"
    raise EnvironmentMissing(
        f"{what}: the CUDA {major}.{minor} runtime ({source}) needs {needs}; driver "
        f"{driver} supports CUDA {have[0]}.{have[1]} at most; update the driver, or install "
        "the build it runs (option install.cuda_build=auto, docs/environments.md)"
    )


def install_check(groups: Iterable, system: dict, system_info: dict) -> str | None:
    """Before `milabench install` on NVIDIA (arch ``cuda``): the line saying which CUDA build
    it installs and why (``system["cuda_build"]``, chosen when the system was loaded), or
    None when nothing was chosen. Raises `EnvironmentMissing` (one line) when the driver
    runs no pinned build, or when a group's pins need a newer driver than this one (a
    variant named explicitly); `ConfigError` for an unknown ``install.cuda_build``.
    Nothing is installed then."""
    choice = system.get("cuda_build") or {}
    if choice.get("error"):
        if choice.get("how") == "option":  # a misspelled option.install.cuda_build
            raise ConfigError(str(choice["error"]))
        raise EnvironmentMissing(str(choice["error"]))
    for group in groups:
        if not group.use_current_env:
            need = required_by_pins(group.requirements)
            check(need, system_info, f"install group {group.name}")
    return choice.get("summary")
