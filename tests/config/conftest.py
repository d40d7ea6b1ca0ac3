"""Shared fixtures for the configuration tests.

Every test starts without MILABENCH_* variables so that the developer's environment
(a fake GPU setting, an option) cannot change what a test sees.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("MILABENCH_"):
            monkeypatch.delenv(name)
    yield
