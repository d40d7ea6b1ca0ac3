"""`needs(*modules)`: skip a test module, at collection, when a module it needs is not
installed, without importing it.

``pytest.importorskip("diffusers")`` at a module's top imports diffusers (2.3 s of CPU,
torch's compiler included) in every worker that collects the file, whether or not it
runs one of its tests; `needs` only looks the module up (`importlib.util.find_spec`).
Its skip is the same module-level skip, and so falls under the same CI rule
(tests/systemtools.py). A module that is installed but fails to import then fails the
test that imports it, loudly, instead of skipping it. Use ``pytest.importorskip`` where
the module's object is needed at the top of the file (``torch = ...``).
"""

from __future__ import annotations

import importlib.util

import pytest


def needs(*modules: str, reason: str | None = None) -> None:
    """Skip the calling module unless every one of ``modules`` can be found."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or broken
            found = False
        if not found:
            pytest.skip(reason or f"could not find {name!r}", allow_module_level=True)
