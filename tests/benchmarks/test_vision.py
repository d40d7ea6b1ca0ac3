"""The vision entries' shared code (benchkit.vision) at tiny sizes on CPU: the JPEG folder
loader and the torchvision benchmark's training step with the plain-torch ResNet, its DDP
path under torchrun, the Lightning Trainer in one process and over two ranks, the FLOPs
declaration, and a clear one-line error when torchvision or timm cannot be imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import BENCHMARKS, bench_env, run_smuggled, run_with_pipe
from .test_llm_finetune import torchrun
from .test_mains import check_budget

PLAIN = ["--model-source", "plain", "--model", "resnet-tiny", "--image-size", "32",
         "--classes", "4", "--batch-size", "4", "--num-workers", "1", "--device", "cpu"]  # fmt: skip


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpegs") / "FakeImageNet"
    done = subprocess.run(
        [sys.executable, "prepare.py", "--data", str(root), "--classes", "4",
         "--images-per-class", "8", "--source-size", "48", "--model", "ignored"],
        cwd=BENCHMARKS / "torchvision", capture_output=True, text=True, timeout=120,
        env=bench_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(root)


def test_jpeg_folder_crops_and_flips(jpegs):
    import torch

    from benchkit.vision import JpegFolder, normalise

    folder = JpegFolder(jpegs, 24)
    assert len(folder) == 32 and folder.num_classes == 4
    image, label = folder[5]
    assert image.shape == (3, 24, 24) and image.dtype == torch.uint8 and 0 <= label < 4
    out = normalise(image[None])
    assert out.dtype == torch.float32 and abs(float(out.mean())) < 3


def test_missing_folder_is_one_line(tmp_path):
    from benchkit.vision import JpegFolder

    with pytest.raises(SystemExit, match="run prepare.py first"):
        JpegFolder(tmp_path / "nothing", 32)


@pytest.mark.slow
@pytest.mark.parametrize("data", ["jpeg", "synthetic"])
def test_torchvision_loop_with_the_plain_model(data, jpegs, python):
    extra = ["--data", jpegs] if data == "jpeg" else ["--synthetic-data", "--fixed-batch"]
    run = run_with_pipe([python, "main.py", *PLAIN, *extra], bench_env(stop=3, skip=1),
                        BENCHMARKS / "torchvision")  # fmt: skip
    check_budget(run, 3, "items/s")
    decl = [r for r in run.records if "flops_per_item" in r]
    assert len(decl) == 1 and decl[0]["flops_source"] == "counted"


@pytest.mark.slow
def test_torchvision_ddp_two_ranks(jpegs, python):
    run = run_smuggled(
        [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *PLAIN, "--data", jpegs,
         "--backend", "gloo"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "torchvision",
    )  # fmt: skip
    check_budget(run, 3, "items/s")
    assert "batch 4 per device x 2" in run.stdout and len(run.events("stop")) == 1


@pytest.mark.slow
def test_lightning_one_process(jpegs, python):
    pytest.importorskip("lightning")
    run = run_with_pipe([python, "main.py", *PLAIN, "--data", jpegs], bench_env(stop=3, skip=1),
                        BENCHMARKS / "lightning")  # fmt: skip
    check_budget(run, 3, "items/s")
    assert "32-true" in run.stdout


@pytest.mark.slow
def test_lightning_ddp_two_ranks(jpegs, python):
    pytest.importorskip("lightning")
    run = run_smuggled(
        [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *PLAIN, "--data", jpegs,
         "--backend", "gloo"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "lightning",
    )  # fmt: skip
    check_budget(run, 3, "items/s")
    assert "x 2" in run.stdout and len(run.events("stop")) == 1


@pytest.mark.parametrize(
    "source, name", [("torchvision", "regnet_y_128gf"), ("timm", "focalnet_base_lrf")]
)
def test_unimportable_library_is_one_line(source, name, monkeypatch):
    from benchkit.vision import build_model

    monkeypatch.setitem(sys.modules, source, None)  # as on a machine where it cannot import
    with pytest.raises(SystemExit, match=f"cannot import {source} here.*--model-source plain"):
        build_model(source, name, 10)


def test_plain_resnet18_has_torchvisions_shape():
    from benchkit.vision import plain_resnet

    model = plain_resnet("resnet18", 1000)
    assert sum(p.numel() for p in model.parameters()) == 11_689_512  # torchvision resnet18


def test_cpu_variant_validates_only_what_it_installs():
    """The cpu pins of the vision folders leave torchvision and timm out (a CUDA build that
    cannot import next to the CPU torch); the install validation must not import them."""
    from milabench.config.entry import Entry
    from milabench.pack import load_pack

    entry = Entry.from_mapping({"name": "tv", "definition": str(BENCHMARKS / "torchvision")})
    pack = load_pack(entry, {"arch": "cpu"})
    assert "torchvision" in pack.key_imports and "timm" in pack.key_imports
    assert "torchvision" not in pack.key_imports_for("cpu")
    assert {"torchvision", "timm", "torch"} <= set(pack.key_imports_for("cuda"))
