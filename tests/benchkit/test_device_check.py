"""A benchmark asked for an accelerator its framework cannot see exits with one line
naming the framework and the device: real benchmark mains, real (CPU) torch.

The JAX side runs in the jax group's own environment: tests/benchmarks/test_jaxrl.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
# scripts written as third parties write them: measured from outside, never edited
UNEDITED = {"thirdparty"}
CHECKS = ("benchkit.torchsetup", "benchkit.jaxsetup")


def mains() -> list[Path]:
    return sorted(p for p in BENCHMARKS.glob("*/main.py") if p.parent.name not in UNEDITED)


def test_every_benchmark_main_starts_with_a_framework_check():
    """A new main.py cannot skip the device check: it must use one of benchkit's setups."""
    missing = [str(p.relative_to(ROOT)) for p in mains()
               if not any(c in p.read_text() for c in CHECKS)]  # fmt: skip
    assert not missing, f"main.py without benchkit.torchsetup/jaxsetup: {missing}"


def torch_version() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    return out.stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["flops/main.py", "--size", "64"],  # setup()
        ["ddp/main.py"],  # its own per-rank device: requested_device()
        ["transformer-lm/main.py"],  # setup()
    ],
    ids=["flops", "ddp", "transformer-lm"],
)
def test_torch_benchmark_asked_for_cuda_on_a_cpu_build_exits_with_one_line(argv):
    version = torch_version()
    if "+cpu" not in version:
        pytest.skip(f"needs a CPU build of torch (this is {version})")
    env = {k: v for k, v in os.environ.items() if k not in ("DATA_FD", "MILABENCH_CONFIG")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, str(BENCHMARKS / argv[0]), *argv[1:], "--device",
                           "cuda"], capture_output=True, text=True, env=env, timeout=300,
                          cwd=BENCHMARKS / Path(argv[0]).parent)  # fmt: skip
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0
    assert len(lines) == 1, proc.stderr
    assert re.fullmatch(rf"torch {re.escape(version)} cannot see device cuda: this build has "
                        r"no CUDA or ROCm support .*", lines[0]), lines[0]  # fmt: skip
    assert "Traceback" not in proc.stderr and not proc.stdout.strip()


def test_jaxsetup_configures_jax_before_its_import_with_the_standard_library_only():
    code = (
        "import os, sys\n"
        "from benchkit import jaxsetup\n"
        "jaxsetup.configure('cpu', 3)\n"
        "assert os.environ['JAX_PLATFORMS'] == 'cpu', os.environ\n"
        "assert os.environ['XLA_FLAGS'] == '--xla_keep=1'\n"  # no flag XLA would skip
        "del os.environ['JAX_PLATFORMS']\n"
        "jaxsetup.configure('cuda', None)\n"  # other devices leave JAX free to choose
        "assert 'JAX_PLATFORMS' not in os.environ\n"
        "assert 'jax' not in sys.modules\n"
    )
    env = {"PYTHONPATH": str(ROOT), "XLA_FLAGS": "--xla_keep=1"}
    proc = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
