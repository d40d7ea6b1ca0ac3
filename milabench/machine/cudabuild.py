"""Which CUDA build of the pinned frameworks an NVIDIA driver runs, and which build an
environment holds.

Each build is an install variant of the same framework versions (`BUILDS`: ``cuda``,
CUDA 13.0; ``cuda12``, CUDA 12.8). `choose` picks the newest build the driver runs by
NVIDIA's minor-version compatibility: a build for CUDA M.m runs on every driver from the
first one of CUDA M.0 (`FIRST_DRIVER`), through that compatibility where the driver's
ceiling is below M.m; a driver below CUDA 12.0 runs none. The rule, the drivers and why:
docs/environments.md "Which CUDA build".

Nothing here starts a process or imports NVML: the driver facts come in as the mapping
`benchkit.accelerators.Accelerators.system_info` returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

OPTION = "install.cuda_build"  # auto (default) or a variant name of BUILDS
# The first driver of each CUDA major version (Linux): the floor of minor-version
# compatibility for every build of that major version.
FIRST_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@dataclass(frozen=True)
class CudaBuild:
    """One pinned CUDA build: its install variant and the CUDA version it was built for."""

    variant: str
    cuda: tuple[int, int]
    torch: str  # where its torch comes from, for people

    @property
    def min_driver(self) -> str:
        """The oldest Linux driver that runs it (minor-version compatibility)."""
        return FIRST_DRIVER[self.cuda[0]]

    def describe(self) -> str:
        return f"{self.variant} (CUDA {self.cuda[0]}.{self.cuda[1]}, {self.torch})"


# Newest first: the first one the driver runs is chosen.
BUILDS = (
    CudaBuild("cuda", (13, 0), "torch 2.13.0 from PyPI"),
    CudaBuild("cuda12", (12, 8), "torch 2.13.0+cu128 from download.pytorch.org"),
)


def by_variant(variant: str) -> CudaBuild | None:
    return next((b for b in BUILDS if b.variant == variant), None)


def driver_cuda(system_info: dict[str, Any]) -> tuple[int, int] | None:
    """The highest CUDA version the driver supports (NVML's 12040 -> (12, 4)); None when
    unknown (no NVML, fake accelerators)."""
    value = system_info.get("cuda_driver_version")
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    if number <= 0:
        return None
    return number // 1000, (number % 1000) // 10


@dataclass(frozen=True)
class Choice:
    """The build `choose` picked for a node, or why there is none (``error``)."""

    variant: str
    how: str  # "driver", "option" or "default" (driver unknown)
    driver_version: str | None = None
    driver_cuda: tuple[int, int] | None = None
    compat: bool = False  # runs through minor-version compatibility
    error: str | None = None

    @property
    def build(self) -> CudaBuild | None:
        return by_variant(self.variant)

    def line(self) -> str:
        """One line for people: what was chosen and why."""
        if self.error:
            return self.error
        build = self.build
        what = build.describe() if build else self.variant
        if self.how == "option":
            return f"CUDA build: {what}, from option {OPTION}"
        if self.driver_cuda is None:
            return f"CUDA build: {what}, the default (the NVIDIA driver's CUDA version is unknown)"
        major, minor = self.driver_cuda
        text = (
            f"CUDA build: {what} for NVIDIA driver {self.driver_version or '?'} "
            f"(CUDA {major}.{minor} at most)"
        )
        if self.compat and build is not None:
            text += (
                f"; runs through CUDA minor-version compatibility (driver >= {build.min_driver})"
            )
        return text

    def record(self) -> dict[str, Any]:
        """JSON-able facts for the run metadata and `milabench machine`."""
        build = self.build
        out: dict[str, Any] = {
            "variant": self.variant,
            "how": self.how,
            "cuda": f"{build.cuda[0]}.{build.cuda[1]}" if build else None,
            "driver_version": self.driver_version,
            "driver_cuda": (
                f"{self.driver_cuda[0]}.{self.driver_cuda[1]}" if self.driver_cuda else None
            ),
            "minor_version_compatibility": self.compat,
            "summary": self.line(),
        }
        if self.error:
            out["error"] = self.error
        return out


def choose(system_info: dict[str, Any], wanted: str | None = None) -> Choice:
    """The build for a driver (`system_info` of the NVML back-end) or the one ``wanted``
    (option ``install.cuda_build``; ``auto`` or None: from the driver).

    Never raises: a driver too old for every build gives a `Choice` whose ``error`` is the
    one line `milabench install` stops with; an unknown build name too.
    """
    driver = system_info.get("driver_version")
    driver = str(driver) if driver not in (None, "") else None
    have = driver_cuda(system_info)
    if wanted not in (None, "", "auto"):
        build = by_variant(str(wanted))
        if build is None:  # the driver's choice, with the reason install stops with
            names = ", ".join(["auto", *(b.variant for b in BUILDS)])
            error = f"option {OPTION}: unknown CUDA build {wanted!r} (use {names})"
            return replace(choose(system_info), how="option", error=error)
        return Choice(build.variant, "option", driver, have, compat=_compat(build, have))
    if have is None:
        return Choice(BUILDS[0].variant, "default", driver, None)
    for build in BUILDS:
        if build.cuda[0] <= have[0]:
            return Choice(build.variant, "driver", driver, have, compat=_compat(build, have))
    oldest = BUILDS[-1]
    return Choice(
        oldest.variant,
        "driver",
        driver,
        have,
        error=(
            f"NVIDIA driver {driver or '?'} supports CUDA {have[0]}.{have[1]} at most; the "
            f"oldest CUDA build milabench pins, {oldest.variant} (CUDA {oldest.cuda[0]}."
            f"{oldest.cuda[1]}), needs driver {oldest.min_driver} or newer: update the driver"
        ),
    )


def _compat(build: CudaBuild, have: tuple[int, int] | None) -> bool:
    return have is not None and have[0] == build.cuda[0] and have < build.cuda


# nvidia_cuda_runtime-13.0.96.dist-info / nvidia_cuda_runtime_cu12-12.8.90.dist-info
_DIST = re.compile(r"^nvidia_cuda_runtime(?:_cu\d+)?-(\d+)\.(\d+)[^/]*\.dist-info$", re.I)


def installed_runtime(site_packages: Path) -> tuple[tuple[int, int], str] | None:
    """The CUDA runtime an environment holds, from its dist-info folder name:
    ``((12, 8), "nvidia_cuda_runtime_cu12-12.8.90")``; None without one (CPU builds,
    ROCm) or when the folder cannot be read."""
    try:
        names = sorted(p.name for p in Path(site_packages).iterdir())
    except OSError:
        return None
    for name in names:
        found = _DIST.match(name)
        if found:
            return (int(found.group(1)), int(found.group(2))), name.removesuffix(".dist-info")
    return None
