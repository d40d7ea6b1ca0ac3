"""benchmarks/geo_gnn/basis_cache.py: DimeNet's sympy bases are computed once, kept in
``$XDG_CACHE_HOME/milabench/dimenet`` and read back equal; a damaged file is computed
again."""

from __future__ import annotations

import importlib.util
import pickle

import pytest
from needs import needs

from .conftest import BENCHMARKS

needs("torch_geometric")


@pytest.fixture
def dimenet_utils():
    """PyG's DimeNet bases module, imported by the test that needs it, not when the
    file is collected (torch_geometric costs about 2 s of CPU in every worker)."""
    from torch_geometric.nn.models import dimenet_utils

    return dimenet_utils


@pytest.fixture
def cache(monkeypatch, tmp_path, dimenet_utils):
    """basis_cache loaded, the cache in ``tmp_path``, dimenet_utils restored afterwards."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name in ("bessel_basis", "real_sph_harm"):
        monkeypatch.setattr(dimenet_utils, name, getattr(dimenet_utils, name))
    spec = importlib.util.spec_from_file_location(
        "geo_basis_cache", BENCHMARKS / "geo_gnn" / "basis_cache.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bases_are_computed_once_and_read_back_equal(cache, dimenet_utils, tmp_path):
    fresh = dimenet_utils.bessel_basis(2, 3), dimenet_utils.real_sph_harm(2)
    cache.cache_bases()
    cache.cache_bases()  # idempotent: one wrapper
    assert dimenet_utils.bessel_basis.__wrapped_compute__.__name__ == "bessel_basis"
    first = dimenet_utils.bessel_basis(2, 3), dimenet_utils.real_sph_harm(2)
    files = sorted(p.name for p in (tmp_path / "milabench" / "dimenet").iterdir())
    assert [f.split("-sympy")[0] for f in files] == ["bessel_basis-2-3", "real_sph_harm-2"]
    assert first == fresh
    # the second build reads the file: what is there is what it gets
    path = next((tmp_path / "milabench" / "dimenet").glob("bessel_basis-2-3-*"))
    path.write_bytes(pickle.dumps("from the file"))
    assert dimenet_utils.bessel_basis(2, 3) == "from the file"


def test_a_damaged_file_is_computed_again(cache, dimenet_utils, tmp_path):
    cache.cache_bases()
    expected = dimenet_utils.bessel_basis(2, 2)
    path = next((tmp_path / "milabench" / "dimenet").glob("bessel_basis-2-2-*"))
    path.write_bytes(b"\x80\x04 not a pickle")
    assert dimenet_utils.bessel_basis(2, 2) == expected
    assert pickle.loads(path.read_bytes()) == expected
