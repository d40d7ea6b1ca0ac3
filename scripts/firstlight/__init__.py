"""First light's parts (scripts/first_light.py and its wheelhouse and rehearsal)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def missing_module(err: ModuleNotFoundError) -> str:
    """One line for a Python that lacks what making the wheelhouse imports: milabench's
    own dependencies (to read the suite) or ``packaging``."""
    return (f"{sys.executable} cannot import {err.name!r}; making the wheelhouse needs "
            f"milabench's dependencies and packaging: pip install -e {REPO} packaging")  # fmt: skip
