"""The fake `pynvml` imported as `pynvml` (tests/fakes/pynvml.py), for the doctor tests."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
def fake_nvml(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    for name in ("MILABENCH_FAKE_GPUS", "CUDA_VISIBLE_DEVICES", "FAKE_PYNVML_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    module = importlib.import_module("pynvml")
    assert Path(module.__file__).parent == FAKES
    monkeypatch.setattr(module, "DEVICES", module.h100_node(4))
    yield module
    sys.modules.pop("pynvml", None)
