"""The memory estimates of the torchvision, timm and Lightning entries (resnet50,
convnext_large, regnet_y_128gf, resnet152-ddp-gpus, focalnet, lightning), held against
upstream's observations and the skip rule as test_memory_estimates.py holds the others.

torchvision and timm do not import next to the CPU build of torch the other tests run on
(PyPI's torchvision wheels are CUDA builds, linked against PyPI's CUDA torch; the CPU
builds live on PyTorch's own index, which the tests' package index need not mirror).
These estimates therefore run in a second Python where they import: the interpreter that
``MILABENCH_VISION_PYTHON`` names (any with torch, torchvision and timm: the GPU image's
Python, for one), else a virtual environment made once per session with uv from the
package index: the pins of benchmarks/torchvision/requirements.cuda.txt (torch,
torchvision, timm: the CUDA builds, which run on a CPU; 4.6 GB, about 20 s from uv's
cache). Why not a CPU build: it is not on PyPI. Why not recorded figures: an estimate is
the code's, and a figure recorded once goes stale with it. An install from the index at
test time puts this file in the system tier, with tests/benchmarks/ (tests/tiers.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sharedbuild import build_once

from benchkit.memory import GPU_CONTEXT, REFERENCE_GPU, does_not_fit, tight_fit

from .memory_upstream import (
    ROOT,
    VISION,
    against_upstream,
    estimate,
    footprint,
    jobs,
    skipped_where_upstream_runs,
    table,
    upstream,
)

PINS = ROOT / "benchmarks" / "torchvision" / "requirements.cuda.txt"
PACKAGES = ("torch", "torchvision", "timm")


def pinned() -> list[str]:
    """``torch==X``, ``torchvision==Y``, ``timm==Z`` as the torchvision group pins them;
    not the CPU build of torch X (``X+cpu``, which ``==X`` also matches, on an index that
    has both): torchvision's wheel is built against the CUDA one."""
    text = PINS.read_text()
    pins = [m.group(0) for name in PACKAGES if (m := re.search(rf"^{name}==\S+", text, re.M))]
    assert len(pins) == len(PACKAGES), (PINS, pins)
    return [f"{pin},!={pin.split('==')[1]}+cpu" if pin.startswith("torch==") else pin
            for pin in pins]  # fmt: skip


def _build(folder: Path) -> str:
    """A virtual environment with the pinned torch, torchvision and timm, made with uv
    from the index pip is set up for (milabench's own translation of pip's settings)."""
    from milabench.envs.pipconf import read_pip_settings

    settings = read_pip_settings()
    venv = folder / "venv"
    uv = [sys.executable, "-m", "uv"]
    env = dict(os.environ, **settings.uv_env())
    subprocess.run([*uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
                   check=True, env=env, timeout=300)  # fmt: skip
    python = venv / "bin" / "python"
    done = subprocess.run(
        [*uv, "pip", "install", "--quiet", "--python", str(python),
         *settings.index_strategy_args(None), *settings.uv_args(), *pinned()],
        capture_output=True, text=True, env=env, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return str(python)


@pytest.fixture(scope="module")
def vision_python(tmp_path_factory) -> str:
    given = os.environ.get("MILABENCH_VISION_PYTHON")
    return given or build_once(tmp_path_factory, "vision-python", _build)


@pytest.fixture(scope="module")
def estimates(vision_python) -> dict[str, dict]:
    """Entry name -> ``{"footprint": {...}}`` for the vision entries."""
    entries = {name: job for name, job in jobs().items() if name in VISION}
    results = estimate(vision_python, entries, dict(os.environ))
    print("\n" + table(results, upstream()))
    return results


def test_every_vision_entry_is_estimated(estimates):
    assert set(estimates) == VISION
    for name, result in estimates.items():
        assert "footprint" in result, (name, result)
        fp = footprint(result)
        assert GPU_CONTEXT < fp.per_gpu <= REFERENCE_GPU, (name, result["gpu"])
        assert does_not_fit(fp, gpu_bytes=REFERENCE_GPU, host_bytes=None) is None
        assert tight_fit(fp, gpu_bytes=REFERENCE_GPU) is None, (name, result["gpu"])


def test_vision_estimates_track_upstreams_observations(estimates):
    problems = against_upstream(estimates, upstream())
    assert not problems, "\n".join(problems)


def test_no_vision_entry_is_skipped_where_upstream_runs_it(estimates):
    skips, warnings = skipped_where_upstream_runs(estimates, upstream())
    assert not skips, "\n".join(map(str, skips))
    print("\n".join(f"warned: {w}" for w in warnings))
