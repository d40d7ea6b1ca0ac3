"""Shared test set-up: make the small helper modules of `tests/` importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
