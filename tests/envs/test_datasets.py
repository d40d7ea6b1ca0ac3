"""benchkit.datasets: synthetic data generated once, marker written last."""

from __future__ import annotations

import json
import sys
import time
from array import array

import pytest

from benchkit.datasets import is_prepared, make_image_folder, make_token_file, prepared


def test_image_folder(tmp_path, capsys):
    Image = pytest.importorskip("PIL.Image")  # Pillow: requested in the `test` extra
    root = make_image_folder(tmp_path / "img", n_classes=3, per_class=4, size=32, seed=1)
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert classes == ["c0000", "c0001", "c0002"]
    files = sorted(root.glob("*/*.jpeg"))
    assert len(files) == 12
    with Image.open(files[0]) as im:
        assert im.format == "JPEG" and im.size == (32, 32) and im.mode == "RGB"
    assert f"generated 12 images (3 classes, 32x32) in {root}" in capsys.readouterr().out
    first_bytes = files[0].read_bytes()

    start = time.perf_counter()
    make_image_folder(root, n_classes=3, per_class=4, size=32, seed=1)
    assert time.perf_counter() - start < 0.1
    assert f"already prepared: 12 images in {root}" in capsys.readouterr().out

    # other parameters: regenerated, classes of the older generation removed
    make_image_folder(root, n_classes=2, per_class=4, size=32, seed=2)
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["c0000", "c0001"]
    assert files[0].read_bytes() != first_bytes
    assert json.loads((root / "done").read_text())["params"]["seed"] == 2


def test_deterministic(tmp_path):
    pytest.importorskip("PIL.Image")
    a = make_image_folder(tmp_path / "a", 2, 2, 16, seed=5, verbose=False)
    b = make_image_folder(tmp_path / "b", 2, 2, 16, seed=5, verbose=False)
    assert (a / "c0001" / "00001.jpeg").read_bytes() == (b / "c0001" / "00001.jpeg").read_bytes()


def test_failure_leaves_no_marker(tmp_path):
    with pytest.raises(RuntimeError):
        with prepared(tmp_path, {"n": 1}) as prep:
            assert not prep.done
            raise RuntimeError("interrupted")
    assert not (tmp_path / "done").exists()
    with prepared(tmp_path, {"n": 1}) as prep:
        assert not prep.done
    assert is_prepared(tmp_path, {"n": 1}) and not is_prepared(tmp_path, {"n": 2})
    with prepared(tmp_path, {"n": 1}) as prep:
        assert prep.done


@pytest.mark.parametrize("numpy_available", [True, False])
def test_token_file(tmp_path, monkeypatch, numpy_available):
    if not numpy_available:
        monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy -> ImportError
    path = make_token_file(tmp_path, 5000, 300, seed=3, verbose=False)
    values = array("H")
    values.frombytes(path.read_bytes())
    assert len(values) == 5000 and max(values) < 300 and len(set(values)) > 200
    big = make_token_file(tmp_path, 10, 100_000, name="big.bin", verbose=False)
    assert big.stat().st_size == 40  # uint32 beyond 65536 ids
    assert (tmp_path / "tokens.bin.done").exists() and (tmp_path / "big.bin.done").exists()
