"""The fake `pynvml` of tests/fakes imported as `pynvml`, and everything it touched undone.

NVIDIA GPUs cannot exist on this machine, so their library is the one thing the tests
fake. A fixture yields from `fake_pynvml`; afterwards the fake is out of `sys.modules`
and `sys.path` and the accelerator detection cache is empty, so that no later test of the
same worker detects the fake GPUs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import benchkit.accelerators

FAKES = Path(__file__).resolve().parent / "fakes"


def fake_pynvml(
    monkeypatch: pytest.MonkeyPatch, devices: int | None = None
) -> Iterator[ModuleType]:
    """Import the fake as `pynvml` (with ``devices`` H100s when given) for one test."""
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    for name in ("MILABENCH_FAKE_GPUS", "MILABENCH_GPU_ARCH", "CUDA_VISIBLE_DEVICES",
                 "FAKE_PYNVML_DEVICES"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    benchkit.accelerators._cache.clear()
    module = importlib.import_module("pynvml")
    assert Path(module.__file__).parent == FAKES
    if devices is not None:
        monkeypatch.setattr(module, "DEVICES", module.h100_node(devices))
    try:
        yield module
    finally:
        # before monkeypatch restores the rest: nothing may import the fake again
        while str(FAKES) in sys.path:
            sys.path.remove(str(FAKES))
        sys.modules.pop("pynvml", None)
        benchkit.accelerators._cache.clear()
