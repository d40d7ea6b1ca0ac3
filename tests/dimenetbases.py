"""DimeNet's sympy bases (benchmarks/geo_gnn/basis_cache.py) computed once per test
session and handed to every process that builds the model: the memory estimates and
the smoke run's ``dimenet`` entry. Each would otherwise spend some 15 s of a core on the
same expressions. The cache's own behaviour (a miss computes and writes, a hit reads the
same expressions, a damaged file is computed again) is tested in test_geo_basis_cache.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sharedbuild import build_once

GEO = Path(__file__).resolve().parents[1] / "benchmarks" / "geo_gnn"
# DimeNet built with the benchmark's basis sizes (main.make_model: 7 spherical, 6 radial)
BUILD = """
from basis_cache import cache_bases
cache_bases()
from torch_geometric.nn.models import DimeNet
DimeNet(8, 1, 1, 2, num_spherical=7, num_radial=6)
"""


def _build(folder: Path) -> str:
    subprocess.run([sys.executable, "-c", BUILD], cwd=GEO, check=True, timeout=900,
                   env=dict(os.environ, XDG_CACHE_HOME=str(folder)))  # fmt: skip
    assert any((folder / "milabench" / "dimenet").iterdir()), "no basis was cached"
    return str(folder)


def dimenet_cache(factory: pytest.TempPathFactory) -> Path:
    """An ``XDG_CACHE_HOME`` holding the bases (made by the session's first caller)."""
    pytest.importorskip("torch_geometric")
    return Path(build_once(factory, "dimenet-bases", _build))


def seed_cache(factory: pytest.TempPathFactory, cache: Path) -> None:
    """Copy the session's bases into the cache folder ``cache`` (a base's ``cache/``,
    which milabench hands its benchmarks as ``XDG_CACHE_HOME``)."""
    source = dimenet_cache(factory) / "milabench" / "dimenet"
    shutil.copytree(source, cache / "milabench" / "dimenet", dirs_exist_ok=True)
