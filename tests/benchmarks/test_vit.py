"""DINOv2 and V-JEPA (plain torch, benchshared.vit) at tiny sizes on CPU: one process and
two torchrun ranks each, read from the session's smoke run (its `dinov2-giant-single`,
`dinov2-giant-gpus`, `vjepa-single` and `vjepa-gpus` entries: records, rates, finite
losses, FLOPs, stop), the data their prepare scripts write (JPEGs; mp4 videos decoded
with decord) and the FLOPs declared with activation checkpointing (run here), and
upstream's choices pinned: the defaults are upstream's settings (vitg14.yaml over DINOv2's
default config; jepa's vith16.yaml), DINOv2's student (stochastic depth, layer scale,
heads), iBOT masks, Sinkhorn-Knopp and augmentation probabilities, V-JEPA's two mask sets.
The ViT itself (stochastic depth per sample, the EMA update): tests/shared/test_vit.py.

`check_smoke_entry` (used by the other benchmark files too) checks one smoke entry's
records as `test_mains.check_budget` checks a run started by hand."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from .conftest import BENCHMARKS, bench_env, run_plain, run_with_pipe
from .smokerun import SmokeRun

DINO = ["--arch", "tiny", "--patch", "8", "--global-size", "48", "--local-size", "24",
        "--local-crops", "2", "--prototypes", "256", "--bottleneck", "32",
        "--ibot-prototypes", "256", "--ibot-bottleneck", "32", "--head-hidden", "64",
        "--batch-size", "4", "--num-workers", "1", "--precision", "fp32",
        "--device", "cpu"]  # fmt: skip
JEPA = ["--arch", "tiny", "--predictor", "tiny", "--patch", "8", "--frames", "4",
        "--image-size", "32", "--batch-size", "4", "--num-workers", "1", "--precision",
        "fp32", "--device", "cpu"]  # fmt: skip
VIDEOS = ["--videos", "8", "--video-frames", "40", "--video-width", "64", "--video-height", "48"]


def load(bench: str, name: str = "main"):
    """``benchmarks/<bench>/<name>.py`` as a module (its folder importable)."""
    folder = str(BENCHMARKS / bench)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(
        f"{bench}_{name}_t", BENCHMARKS / bench / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("vitdata")
    images, videos = root / "FakeImageNet", root / "FakeVideo" / "video_metainfo.csv"
    for folder, argv in (
        ("dinov2", ["--data", str(images), "--classes", "4", "--images-per-class", "8",
                    "--source-size", "64", *DINO]),
        ("vjepa", ["--dataset", str(videos), *VIDEOS, *JEPA]),
    ):  # fmt: skip
        done = run_plain([sys.executable, "prepare.py", *argv], bench_env(), BENCHMARKS / folder,
                         timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert len(list(videos.parent.glob("*.mp4"))) == 8
    assert len(videos.read_text().splitlines()) == 8
    return {"dinov2": ["--data", str(images)], "vjepa": ["--dataset", str(videos)]}


@pytest.mark.parametrize("bench, entry", [("dinov2", "dinov2-giant-single"),
                                          ("vjepa", "vjepa-single")])  # fmt: skip
def test_one_process(bench, entry, smoke: SmokeRun):
    """One process trains on the prepared data and reports.
    Reads the session's smoke run (entry ``dinov2-giant-single`` / ``vjepa-single``)."""
    assert smoke.command(entry)[1].endswith(f"benchmarks/{bench}/main.py")
    smoke.check_measured(entry, "items/s")
    assert [r["flops_source"] for r in smoke.declared_flops(entry)] == ["counted"]
    assert "x 1, " in smoke.stdout_of(entry)


@pytest.mark.parametrize("bench, entry", [("dinov2", "dinov2-giant-gpus"),
                                          ("vjepa", "vjepa-gpus")])  # fmt: skip
def test_two_ranks(bench, entry, smoke: SmokeRun):
    """Two torchrun ranks (gloo) train and report once.
    Reads the session's smoke run (entry ``dinov2-giant-gpus`` / ``vjepa-gpus``)."""
    command = smoke.command(entry)
    assert "--nproc-per-node=2" in command and smoke.option(entry, "--backend") == "gloo"
    assert any(c.endswith(f"benchmarks/{bench}/main.py") for c in command)
    smoke.check_measured(entry, "items/s")
    assert "x 2" in smoke.stdout_of(entry) and len(smoke.event_data(entry, "stop")) == 1
    assert "terminate called" not in smoke.stderr_of(entry)


RESHARD = """
import importlib.util, sys
import torch, torch.distributed as dist, torch.nn as nn
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("dinov2_main", sys.argv[1] + "/main.py")
main = importlib.util.module_from_spec(spec)
spec.loader.exec_module(main)
dist.init_process_group("gloo")

class Part(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x

torch.manual_seed(0)
args = main.parse_args(["--precision", sys.argv[2], "--device", "cpu"])
teacher = main.shard(Part(), args, torch.device("cpu"), reduce_fp32=False)
x = torch.ones(2, 8)
for step in range(3):
    with torch.no_grad():
        out = teacher(x).float()
    main.reshard(teacher)
    expected = 0.0 if step else None
    if expected is not None:
        assert out.abs().max().item() == expected, (step, out)
    with torch.no_grad():  # what the EMA does: the sharded flat parameters, in place
        for p in main.flat_params(teacher):
            p.zero_()
open(f"rank{dist.get_rank()}.ok", "w").close()  # two ranks' prints can interleave
teacher = out = None  # FSDP's state goes before its group (as main.py's finally does)
from benchkit.exiting import finish
from benchkit.torchsetup import teardown_distributed
teardown_distributed()
finish(0)  # the benchmark's own ending: freeing torch's modules at exit can abort (gloo)
"""


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_teacher_gathers_the_emas_weights_at_every_step_on_two_ranks(tmp_path, precision):
    """FSDP's ``SHARD_GRAD_OP`` frees gathered weights only after a backward, which the
    teacher never runs: `reshard` frees them after its forward (DINOv2's
    ``reshard_fsdp_model``), so the next forward gathers what the EMA wrote. Two gloo
    ranks, the benchmark's own `shard` and `flat_params`, with and without mixed
    precision; without `reshard` the zeroed weights never reach the forward."""
    script = tmp_path / "reshard.py"
    script.write_text(RESHARD)
    done = run_plain([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                      "--standalone", str(script), str(BENCHMARKS / "dinov2"), precision],
                     bench_env(), tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("*.ok")) == ["rank0.ok", "rank1.ok"]


def test_upstream_settings_are_the_defaults():
    """main.py's defaults are upstream's: DINOv2's vitg14.yaml over its default config
    and milabench's overrides (batch 32, 10 workers); jepa's vith16.yaml (batch 24, 12
    workers)."""
    from benchshared.vit import ARCHES

    assert ARCHES["giant"] == (1536, 40, 24, 4096, True)  # vit_giant2, swiglufused 4096
    assert ARCHES["huge"] == (1280, 32, 16, 5120, False)  # jepa's vit_huge
    dino = vars(load("dinov2").parse_args([]))
    assert {k: dino[k] for k in (
        "arch", "patch", "batch_size", "global_size", "local_size", "local_crops",
        "prototypes", "bottleneck", "ibot_prototypes", "ibot_bottleneck", "head_hidden",
        "drop_path", "layer_scale", "block_chunks", "mask_probability", "mask_ratio",
        "koleo", "teacher_temp", "clip_grad", "momentum", "weight_decay", "num_workers",
        "precision", "gradient_checkpointing")} == {
        "arch": "giant", "patch": 14, "batch_size": 32, "global_size": 224, "local_size": 98,
        "local_crops": 8, "prototypes": 131072, "bottleneck": 384, "ibot_prototypes": 131072,
        "ibot_bottleneck": 256, "head_hidden": 2048, "drop_path": 0.4, "layer_scale": 1e-5,
        "block_chunks": 4, "mask_probability": 0.5, "mask_ratio": [0.1, 0.5], "koleo": 0.1,
        "teacher_temp": 0.04, "clip_grad": 3.0, "momentum": 0.994, "weight_decay": 0.04,
        "num_workers": 10, "precision": "tf32-fp16", "gradient_checkpointing": False,
    }  # fmt: skip
    jepa = vars(load("vjepa").parse_args([]))
    assert {k: jepa[k] for k in (
        "arch", "predictor", "patch", "tubelet", "frames", "frame_step", "image_size",
        "batch_size", "mask_blocks", "mask_scale", "mask_aspect", "momentum",
        "weight_decay", "num_workers", "precision", "gradient_checkpointing")} == {
        "arch": "huge", "predictor": "small", "patch": 16, "tubelet": 2, "frames": 16,
        "frame_step": 4, "image_size": 224, "batch_size": 24, "mask_blocks": [8, 2],
        "mask_scale": [0.15, 0.7], "mask_aspect": [0.75, 1.5], "momentum": 0.998,
        "weight_decay": 0.04, "num_workers": 12, "precision": "bf16",
        "gradient_checkpointing": False,
    }  # fmt: skip
    assert ARCHES["small"][:2] == (384, 12)  # the predictor: 12 blocks, 384 wide


def test_models_have_upstreams_shapes():
    """On the meta device: DINOv2's student (ViT-g/14 in 4 chunks of 10 blocks, layer
    scale 1e-5, a mask token, DINO head 2048-2048-384 + 131,072 weight-normalised
    prototypes, iBOT head 2048-2048-256 + 131,072); V-JEPA's ViT-H encoder and its
    predictor (12 blocks of 384 with the encoder's 16 heads, a mask token per set)."""
    import torch

    dinov2, vjepa = load("dinov2"), load("vjepa")
    with torch.device("meta"):
        student = dinov2.build(dinov2.parse_args([]))
        encoder, predictor = vjepa.build(vjepa.parse_args([]), 1568)
    backbone = student["backbone"]
    assert [len(chunk) for chunk in backbone.blocks] == [10, 10, 10, 10]
    block = backbone.blocks[0][0]
    assert block.drop_path == 0.4 and block.ls1.shape == (1536,)
    assert backbone.mask_token.shape == (1, 1536)
    assert 1.1e9 < sum(p.numel() for p in backbone.parameters()) < 1.2e9
    for name, bottleneck in (("dino_head", 384), ("ibot_head", 256)):
        head = student[name]
        assert [m.out_features for m in head.mlp if hasattr(m, "out_features")] == [
            2048, 2048, bottleneck]  # fmt: skip
        weight = head.last_layer.parametrizations.weight
        assert weight.original1.shape == (131072, bottleneck)  # direction
        assert weight.original0.shape == (131072, 1)  # norm
    assert 6.2e8 < sum(p.numel() for p in encoder.parameters()) < 6.4e8
    assert len(encoder.blocks[0]) == 32 and not encoder.pos.requires_grad
    assert len(predictor.vit.blocks[0]) == 12 and predictor.vit.dim == 384
    assert len(predictor.mask_tokens) == 2


def test_ibot_masks_and_crops_of_the_collate():
    """DINOv2's collate: crops stacked crop-major in fp16; half of the global crops
    masked with shares from consecutive slices of [0.1, 0.5]; the buffer size
    (``upperbound``), the masked indices and their weights."""
    import torch

    mc = load("dinov2", "multicrop")
    args = load("dinov2").parse_args(["--batch-size", "8"])
    samples = [(torch.full((2, 3, 224, 224), float(i)), torch.zeros(8, 3, 98, 98))
               for i in range(8)]  # fmt: skip
    batch = mc.Collate(args)(samples)
    assert batch["global"].dtype == torch.float16 and batch["global"].shape == (16, 3, 224, 224)
    assert batch["local"].shape == (64, 3, 98, 98)
    assert [int(c[0, 0, 0]) for c in batch["global"]] == list(range(8)) * 2
    masks = batch["masks"]
    counts = masks.sum(-1)
    assert masks.shape == (16, 256) and int((counts > 0).sum()) == 8
    assert int(counts.max()) <= 128  # at most half of the 16 x 16 patches
    assert batch["upperbound"] == sum(int(256 * p) for p in torch.linspace(0.1, 0.5, 9)[1:])
    assert torch.equal(batch["mask_index"], masks.flatten().nonzero().flatten())
    assert int(batch["n_masked"]) == int(counts.sum())
    assert torch.allclose(batch["masks_weight"], (1 / counts.clamp(min=1))[masks.nonzero()[:, 0]])


def test_augmentation_probabilities_are_the_ones_dinov2_applies(monkeypatch, tmp_path):
    """Per image: 2 global crops of 224 px (scale 0.32-1) and 8 local crops of 98 px
    (0.05-0.32); blur with probability 0 / 0.9 on the global crops and 0.5 on the local
    ones (DINOv2's ``GaussianBlur(p)`` applies with 1 - p), solarisation 0.2 on the
    second global crop only."""
    import torch

    from benchshared.datasets import make_image_folder

    mc = load("dinov2", "multicrop")
    make_image_folder(tmp_path, 1, 1, 64, verbose=False)
    calls = []

    def augment_crop(img, size, scale, blur, solarize, rng):
        calls.append((size, scale, blur, solarize))
        return torch.zeros(3, size, size)

    monkeypatch.setattr(mc, "augment_crop", augment_crop)
    mc.MultiCropFolder(tmp_path, load("dinov2").parse_args([]))[0]
    assert calls == [(224, (0.32, 1.0), 0.0, 0.0), (224, (0.32, 1.0), 0.9, 0.2)] + [
        (98, (0.05, 0.32), 0.5, 0.0)] * 8  # fmt: skip


def test_sinkhorn_knopp_balances_prototypes_and_samples():
    """Three iterations of Sinkhorn-Knopp (one process): each sample's assignment sums
    to 1 and the prototypes share the samples about equally."""
    import torch

    dinov2 = load("dinov2")
    logits = torch.randn(64, 32)
    q = dinov2.sinkhorn_knopp(logits, 0.5)
    assert torch.allclose(q.sum(-1), torch.ones(64), atol=1e-5)
    softmax = torch.softmax(logits / 0.5, dim=-1)
    assert q.sum(0).std() < softmax.sum(0).std() / 4


def test_two_mask_sets_as_jepa_draws_them():
    """jepa's multiblock3d with vith16.yaml's two sets on the 8 x 14 x 14 grid: set 1
    (8 blocks of 15%) hides about three quarters of each clip, set 2 (2 blocks of 70%)
    about nine tenths; a block spans every time step; positions differ between clips;
    context and targets are disjoint and cut to the shortest of the batch."""
    import torch

    vjepa = load("vjepa")
    args = vjepa.parse_args([])
    torch.manual_seed(0)
    _clips, context, targets = vjepa.MaskCollator(args)([torch.zeros(1)] * 24)
    assert len(context) == len(targets) == 2
    hidden = [1 - c.shape[1] / 1568 for c in context]  # the shortest context of the batch
    assert 0.65 < hidden[0] < 0.85 and 0.85 < hidden[1] < 0.97, hidden
    for c, t in zip(context, targets, strict=True):
        assert c.shape[0] == t.shape[0] == 24
        assert c.shape[1] + t.shape[1] <= 1568
        for row_c, row_t in zip(c, t, strict=True):
            assert not set(row_c.tolist()) & set(row_t.tolist())
        assert not all(torch.equal(c[0], row) for row in c)  # per-clip positions
        # a clip's hidden cells are the same at every time step (the cut to the
        # shortest of the batch drops the last ones: the first two steps are whole)
        for row in t.tolist():
            first = {i for i in row if i < 196}
            assert first and first == {i - 196 for i in row if 196 <= i < 392}


@pytest.mark.slow
@pytest.mark.parametrize("bench, argv", [("dinov2", DINO), ("vjepa", JEPA)])
def test_checkpointing_recomputation_is_declared_beside_the_model_flops(bench, argv, data, python):
    """With activation checkpointing the declared FLOPs per item are the model's (the
    same as without it); what the device executes, recomputed forwards included, is
    declared beside them (`hardware_flops_per_item`, the report's HFU)."""

    def declared(*extra: str) -> dict:
        run = run_with_pipe([python, "main.py", *argv, *data[bench], *extra],
                            bench_env(stop=2, skip=1), BENCHMARKS / bench)  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        found = [r for r in run.records if "flops_per_item" in r]
        assert len(found) == 1, found
        return found[0]

    plain = declared()
    ckpt = declared("--gradient-checkpointing")
    assert "hardware_flops_per_item" not in plain
    assert ckpt["flops_per_item"] == pytest.approx(plain["flops_per_item"], rel=1e-6)
    # the checkpointed blocks' forward runs twice: more work, at most 4/3 of the model's
    assert plain["flops_per_item"] < ckpt["hardware_flops_per_item"]
    assert ckpt["hardware_flops_per_item"] <= 4 / 3 * plain["flops_per_item"]
