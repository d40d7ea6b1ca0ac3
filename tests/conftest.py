"""Shared test set-up: make the small helper modules of `tests/` importable, and find
(or install) the headless Chromium the HTML tests draw pages with."""

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    from debian import ensure_packages

    reason = ensure_packages("chromium")
    if path := shutil.which("chromium"):
        return path
    pytest.skip(f"chromium could not be installed: {reason}")
