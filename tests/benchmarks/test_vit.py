"""DINOv2 and V-JEPA (plain torch, benchkit.vit) at tiny sizes on CPU: one process and two
torchrun ranks each, the data their prepare scripts write, records (rates, finite losses,
FLOPs, stop), the EMA teacher/target moving towards the student, the masking."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import BENCHMARKS, bench_env, run_smuggled, run_with_pipe
from .test_llm_finetune import torchrun
from .test_mains import check_budget

DINO = ["--arch", "tiny", "--patch", "8", "--global-size", "48", "--local-size", "24",
        "--local-crops", "2", "--prototypes", "256", "--head-hidden", "64", "--batch-size",
        "4", "--num-workers", "1", "--precision", "fp32", "--device", "cpu"]  # fmt: skip
JEPA = ["--arch", "tiny", "--predictor", "tiny", "--patch", "8", "--frames", "4",
        "--image-size", "32", "--mask-blocks", "2", "--batch-size", "4", "--num-workers", "1",
        "--precision", "fp32", "--device", "cpu"]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("vitdata")
    images, clips = root / "FakeImageNet", root / "FakeVideo" / "video_metainfo.csv"
    for folder, argv in (
        ("dinov2", ["--data", str(images), "--classes", "4", "--images-per-class", "8",
                    "--source-size", "64", *DINO]),
        ("vjepa", ["--dataset", str(clips), "--clips", "16", *JEPA]),
    ):  # fmt: skip
        done = subprocess.run([sys.executable, "prepare.py", *argv], cwd=BENCHMARKS / folder,
                              capture_output=True, text=True, timeout=120, env=bench_env())  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert len(list(clips.parent.glob("*.npy"))) == 16
    return {"dinov2": ["--data", str(images)], "vjepa": ["--dataset", str(clips)]}


@pytest.mark.slow
@pytest.mark.parametrize("bench, argv", [("dinov2", DINO), ("vjepa", JEPA)])
def test_one_process(bench, argv, data, python):
    run = run_with_pipe([python, "main.py", *argv, *data[bench]], bench_env(stop=3, skip=1),
                        BENCHMARKS / bench)  # fmt: skip
    check_budget(run, 3, "items/s")
    assert [r["flops_source"] for r in run.records if "flops_per_item" in r] == ["counted"]


@pytest.mark.slow
@pytest.mark.parametrize("bench, argv", [("dinov2", DINO), ("vjepa", JEPA)])
def test_two_ranks(bench, argv, data, python):
    run = run_smuggled(
        [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *argv, *data[bench],
         "--backend", "gloo"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / bench,
    )  # fmt: skip
    check_budget(run, 3, "items/s")
    assert "x 2" in run.stdout and len(run.events("stop")) == 1
    assert "terminate called" not in run.stderr


def test_ema_moves_the_teacher_towards_the_student():
    import copy

    import torch

    from benchkit.vit import build_vit, ema_update

    student = build_vit("tiny", patch=8, cls_token=True, max_tokens=16)
    teacher = copy.deepcopy(student)
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
    before = [p.clone() for p in teacher.parameters()]
    ema_update(teacher, student, 0.9)
    for b, t, s in zip(before, teacher.parameters(), student.parameters(), strict=True):
        assert torch.allclose(t, 0.9 * b + 0.1 * s)
    out = student(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 1 + 16, 64)  # CLS + 4 x 4 patches


def test_block_mask_hides_most_of_the_grid_the_same_at_every_time():
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("vjepa_main", BENCHMARKS / "vjepa" / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    keep, hide = module.block_mask(8, 14, 14, 8, torch.Generator().manual_seed(0))
    assert len(keep) + len(hide) == 8 * 14 * 14 and len(keep) > 0
    assert len(hide) / (8 * 14 * 14) > 0.5
    per_frame = keep.view(8, -1) % (14 * 14)
    assert all(torch.equal(per_frame[0], row) for row in per_frame)
