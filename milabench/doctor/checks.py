"""Every check of this machine, in the order `milabench doctor` lists them: the host,
NVIDIA GPUs, AMD and Intel GPUs, then (for a node of fleet or preflight) whether this
interpreter can run milabench.

`run_checks` is what `milabench doctor` and `milabench run` call here, and what the
inline probe (`milabench.doctor.probe`) runs on a node. Standard library only: it is sent
to nodes inline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from milabench.doctor.findings import Finding
from milabench.doctor.host import host_findings
from milabench.doctor.interpreter import PYTHON_HINT, check_modules
from milabench.doctor.nvidia import nvidia_findings
from milabench.doctor.sysfs import sysfs_gpu_findings
from milabench.doctor.thresholds import DEFAULT_SAMPLE


def run_checks(
    *,
    sample: float = DEFAULT_SAMPLE,
    paths: Sequence[str] = (),
    cuda_needed: tuple[int, int] | None = None,
    cuda_source: str = "",
    modules: bool = False,
    python_hint: str = PYTHON_HINT,
    nvml: Any = None,
) -> list[Finding]:
    """Every check of this machine: host, then NVIDIA, AMD and Intel GPUs, then (with
    ``modules``) whether this interpreter can run milabench."""
    out = host_findings(sample=sample, paths=paths)
    out += nvidia_findings(nvml, cuda_needed=cuda_needed, cuda_source=cuda_source)
    out += sysfs_gpu_findings()
    if modules:
        out.append(check_modules(python_hint=python_hint))
    return out
