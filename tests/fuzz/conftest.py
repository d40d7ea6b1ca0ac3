"""Hypothesis profiles for the fuzz tests.

CI runs the ``ci`` profile: derandomized (the same examples on every run), a few thousand
examples over the whole folder, well under a minute on two cores. To fuzz for longer
locally, pick the ``long`` profile (random seeds, ten times more examples per test):

    HYPOTHESIS_PROFILE=long python -m pytest tests/fuzz -q

Each test's ``max_examples`` is scaled by ``fuzz_util.fuzz_settings``, so ``long`` keeps
the relative weights of the tests (``FUZZ_SCALE=N`` sets the factor by hand).
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
