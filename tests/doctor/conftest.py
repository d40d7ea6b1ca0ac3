"""The fake `pynvml` imported as `pynvml` (tests/fakes/pynvml.py), for the doctor tests."""

from __future__ import annotations

import pytest
from fakenvml import fake_pynvml


@pytest.fixture
def fake_nvml(monkeypatch):
    yield from fake_pynvml(monkeypatch, devices=4)
