"""benchshared.datasets: synthetic data generated once, marker written last."""

from __future__ import annotations

import json
import sys
import time
from array import array

import pytest

from benchshared.datasets import (
    batches_per_rank,
    generation_workers,
    images_per_class,
    is_prepared,
    make_image_folder,
    make_token_file,
    node_ranks,
    prepare_fake_imagenet,
    prepared,
)


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


def images(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.glob("*/*.jpeg"))}


def test_image_folder_grows_and_never_shrinks(tmp_path, capsys):
    """Entries sharing a folder need different sizes: the folder grows to the largest,
    adding only the missing images, and is never regenerated for a smaller one."""
    pytest.importorskip("PIL.Image")
    root = make_image_folder(tmp_path / "img", n_classes=3, per_class=4, size=24, seed=1)
    before = images(root)
    make_image_folder(root, n_classes=3, per_class=6, size=24, seed=1)
    assert f"added 6 images (3 classes, 24x24) to {root}: 18 in all" in capsys.readouterr().out
    grown = images(root)
    assert len(grown) == 18 and all(grown[name] == data for name, data in before.items())
    start = time.perf_counter()
    make_image_folder(root, n_classes=3, per_class=5, size=24, seed=1)  # fewer: kept
    assert time.perf_counter() - start < 0.1
    assert f"already prepared: 18 images in {root}" in capsys.readouterr().out
    assert images(root) == grown
    # grown in two calls or made in one: the same folder, byte for byte
    assert images(make_image_folder(tmp_path / "one", 3, 6, 24, seed=1, verbose=False)) == grown
    assert json.loads((root / "done").read_text())["params"]["per_class"] == 6
    assert not list(root.glob("*/*.partial"))


def test_parallel_generation_is_the_serial_one(tmp_path):
    pytest.importorskip("PIL.Image")
    serial = make_image_folder(tmp_path / "s", 4, 3, 16, seed=2, workers=1, verbose=False)
    parallel = make_image_folder(tmp_path / "p", 4, 3, 16, seed=2, workers=2, verbose=False)
    assert images(serial) == images(parallel) and len(images(serial)) == 12
    assert generation_workers(10) == 1 and generation_workers(10**6) >= 1


def test_unfinished_folder_is_generated_again(tmp_path):
    """No marker (an interrupted first generation): every class folder is redone."""
    pytest.importorskip("PIL.Image")
    stale = tmp_path / "img" / "c0000"
    stale.mkdir(parents=True)
    (stale / "99999.jpeg").write_bytes(b"half an image")
    (tmp_path / "img" / "notes.txt").write_text("not ours: kept")
    root = make_image_folder(tmp_path / "img", 2, 2, 16, verbose=False)
    assert sorted(images(root)) == ["c0000/00000.jpeg", "c0000/00001.jpeg",
                                    "c0001/00000.jpeg", "c0001/00001.jpeg"]  # fmt: skip
    assert (root / "notes.txt").exists()


def test_folder_size_scales_with_gpus_batch_and_window():
    assert batches_per_rank(None) == 160  # (10 s warm-up + 30 s window) / 0.25 s per step
    assert batches_per_rank({"warmup_max": "5s", "max": "10s"}) == 60
    assert batches_per_rank({"max": 0}) == 160  # no time bound: the default
    assert batches_per_rank({"max": "bad"}) == 160  # reported by the configuration check
    assert node_ranks({"MILABENCH_GPU_COUNT": "8"}, {}) == 8
    assert node_ranks({"MILABENCH_GPU_COUNT": "8"}, {"num_machines": 2}) == 16
    assert node_ranks({"MILABENCH_GPU_COUNT": "0"}, {}) == 1  # a CPU node: one rank
    assert node_ranks({}, {}) == 1
    config = json.dumps({"num_machines": 2})
    assert node_ranks({"MILABENCH_GPU_COUNT": "4", "MILABENCH_CONFIG": config}) == 8
    assert node_ranks({"MILABENCH_GPU_COUNT": "4", "MILABENCH_CONFIG": "suite.yaml"}) == 4
    # 8 GPUs x 160 batches of 256: 327,680 images over 1000 classes
    assert images_per_class(256, 8, 160, 1000) == 328
    assert images_per_class(256, 1, 160, 1000) == 41
    with pytest.raises(ValueError):
        images_per_class(0, 8, 160, 1000)


def test_prepare_sizes_the_shared_folder_from_the_entry(tmp_path, monkeypatch, capsys):
    """prepare.py's argv and variables size the folder: --images-per-class when given
    (the smoke suite's tiny sets), else the node's GPUs x the window's batches x the
    entry's batch size."""
    pytest.importorskip("PIL.Image")
    window = {"warmup_min": 0, "warmup_max": "0.5s", "min": 0, "max": "0.5s"}  # 4 batches
    entry = {"num_machines": 1, "measure": window}
    monkeypatch.setenv("MILABENCH_CONFIG", json.dumps(entry))
    monkeypatch.setenv("MILABENCH_GPU_COUNT", "2")
    common = ["--data", str(tmp_path / "FakeImageNet"), "--classes", "3", "--source-size", "16"]
    prepare_fake_imagenet([*common, "--batch-size", "5", "--model", "x"], "torchvision")
    out = capsys.readouterr().out
    assert "sized for 2 rank(s) x 4 batches of 5: 14 images in each of 3 classes" in out
    assert len(images(tmp_path / "FakeImageNet")) == 42  # ceil(5 x 4 x 2 / 3) = 14 per class
    prepare_fake_imagenet([*common, "--batch-size", "2"], "dinov2")  # smaller: kept
    assert "already prepared: 42 images" in capsys.readouterr().out
    explicit = ["--data", str(tmp_path / "small"), "--classes", "2", "--source-size", "16"]
    prepare_fake_imagenet([*explicit, "--images-per-class", "3", "--batch-size", "64"], "t")
    assert len(images(tmp_path / "small")) == 6
