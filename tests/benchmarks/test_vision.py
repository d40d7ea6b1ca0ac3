"""The vision entries on benchshared.vision at tiny sizes on CPU: the torchvision
benchmark's training step with the plain-torch ResNet, its DDP path under torchrun, the
Lightning Trainer in one process and over two ranks, the FLOPs declaration. The loader,
the synthetic batches and the model factory themselves: tests/shared/test_vision.py.
The configurations that config/standard-smoke.yaml runs (resnet50, resnet50-noio,
focalnet, resnet152-ddp-gpus, lightning, lightning-gpus on the plain model) are read from
the session's smoke run (smokerun.py); the others run here for a few steps.

Upstream milabench's choices for these entries (docs/parity.md, commit faf39234) are
pinned here: the optimisers (plain SGD, timm's SGD for focalnet, Adam for Lightning) and
the standard suite's argv for each entry (images normalised in the loader workers, the
``-noio`` batch, timm's augmentations)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from .conftest import BENCHMARKS, bench_env, run_plain, run_with_pipe
from .smokerun import SmokeRun
from .test_mains import check_budget

PLAIN = ["--model-source", "plain", "--model", "resnet-tiny", "--image-size", "32",
         "--classes", "4", "--batch-size", "4", "--num-workers", "1", "--device", "cpu"]  # fmt: skip
# What config/standard.yaml adds: upstream's loader and -noio batch, timm's recipe
UPSTREAM_LOADER = ["--normalise-in-workers", "--cast-inputs", "--channels-last"]
TIMM_RECIPE = ["--momentum", "0.9", "--nesterov", "--weight-decay", "2e-5", "--no-bias-decay",
               "--label-smoothing", "0.1", "--color-jitter", "0.4", "--random-interpolation",
               "--cudnn-benchmark"]  # fmt: skip


def load_main(name: str) -> ModuleType:
    """``benchmarks/<name>/main.py`` as a module (its functions, not its run)."""
    spec = importlib.util.spec_from_file_location(f"{name}_main", BENCHMARKS / name / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpegs") / "FakeImageNet"
    done = run_plain(
        [sys.executable, "prepare.py", "--data", str(root), "--classes", "4",
         "--images-per-class", "8", "--source-size", "48", "--model", "ignored"],
        bench_env(), BENCHMARKS / "torchvision", timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(root)


def test_torchvision_optimisers_are_upstreams():
    """The torchvision script's defaults are upstream's ``torch.optim.SGD(params, lr)``;
    focalnet's flags give timm's ``--opt sgd`` (Nesterov, momentum 0.9) with weight decay
    2e-5 on parameters of 2 or more dimensions only (timm's ``param_groups_weight_decay``)
    and label smoothing 0.1."""
    import torch

    from benchshared.vision import optimizer_kind, plain_resnet

    main = load_main("torchvision")
    model = plain_resnet("resnet-tiny", 10)
    args = main.parse_args([])
    opt = main.make_optimizer(model, args)
    assert type(opt) is torch.optim.SGD and len(opt.param_groups) == 1
    group = opt.param_groups[0]
    assert (group["momentum"], group["weight_decay"], group["nesterov"]) == (0, 0, False)
    assert group["dampening"] == 0 and len(group["params"]) == len(list(model.parameters()))
    assert (args.label_smoothing, args.cudnn_benchmark, args.normalise_in_workers) == (
        0, False, False,
    )  # fmt: skip
    assert optimizer_kind(args) == "sgd"  # no momentum buffer in the memory estimate

    args = main.parse_args(["--lr", "0.05", *TIMM_RECIPE])
    opt = main.make_optimizer(model, args)
    flat, decayed = opt.param_groups
    assert all(g["nesterov"] and g["momentum"] == 0.9 and g["lr"] == 0.05 for g in (flat, decayed))
    assert (flat["weight_decay"], decayed["weight_decay"]) == (0.0, 2e-5)
    assert flat["params"] and all(p.ndim <= 1 for p in flat["params"])
    assert decayed["params"] and all(p.ndim >= 2 for p in decayed["params"])
    assert len(flat["params"]) + len(decayed["params"]) == len(list(model.parameters()))
    assert (args.label_smoothing, args.color_jitter, args.random_interpolation) == (0.1, 0.4, True)
    assert optimizer_kind(args) == "sgd-momentum"
    with pytest.raises(SystemExit):
        main.parse_args(["--nesterov"])  # Nesterov needs a momentum


def test_lightning_step_is_upstreams():
    """Upstream's Lightning step: Adam at lr 1e-3, ``bf16-mixed`` with TF32 on."""
    import torch

    from benchkit.torchsetup import _TF32, amp_dtype
    from benchshared.vision import optimizer_kind, plain_resnet

    main = load_main("lightning")
    args = main.parse_args([])
    assert (args.optimizer, args.lr) == ("adam", 1e-3) and optimizer_kind(args) == "adam"
    opt = main.make_optimizer(plain_resnet("resnet-tiny", 10).parameters(), args)
    assert type(opt) is torch.optim.Adam and opt.param_groups[0]["lr"] == 1e-3
    assert main.LIGHTNING_PRECISION["tf32-bf16"] == "bf16-mixed"
    assert main.parse_args(["--precision", "tf32-bf16"]).precision == "tf32-bf16"
    assert amp_dtype("tf32-bf16") is torch.bfloat16 and "tf32-bf16" in _TF32


def test_standard_vision_entries_pass_upstreams_settings(tmp_path, monkeypatch):
    """config/standard.yaml: every torchvision, timm and Lightning entry does upstream's
    work (``parity: same``, docs/parity.md) with upstream's settings."""
    from milabench.config import load_suite

    for key in ("MILABENCH_CONFIG", "MILABENCH_SYSTEM", "MILABENCH_GPU_ARCH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:8:81920")
    entries = load_suite(BENCHMARKS.parent / "config" / "standard.yaml", base=tmp_path).all_entries
    upstream_workers = "auto({n_worker}, 8)"
    # name: (model, batch, precision, lr, channels-last, inputs cast to the autocast dtype)
    torchvision = {
        "resnet50": ("resnet50", 256, "tf32-fp16", 0.01, True, True),
        "convnext_large-fp32": ("convnext_large", 128, "fp32", 0.01, False, True),
        "convnext_large-fp16": ("convnext_large", 128, "fp16", 0.01, False, True),
        "convnext_large-tf32": ("convnext_large", 128, "tf32", 0.01, False, True),
        "convnext_large-tf32-fp16": ("convnext_large", 128, "tf32-fp16", 0.01, False, True),
        "regnet_y_128gf": ("regnet_y_128gf", 64, "tf32-fp16", 0.01, False, True),
        # torchvision_ddp/main.py: bf16 autocast, SGD(lr=1e-3), images moved uncast
        "resnet152-ddp-gpus": ("resnet152", 256, "bf16", 0.001, False, False),
    }
    optimiser_flags = {"--momentum", "--nesterov", "--weight-decay", "--no-bias-decay"}
    for name, (model, batch, precision, lr, channels_last, cast) in torchvision.items():
        entry = entries[name]
        argv = dict(entry.argv)
        assert entry.parity == "same", name
        assert (argv["--model"], argv["--batch-size"]) == (model, batch), name
        assert (argv["--precision"], argv["--lr"]) == (precision, lr), name
        assert argv["--num-workers"] == upstream_workers, name
        assert argv.get("--normalise-in-workers") is True, name
        assert bool(argv.get("--cast-inputs")) == cast, name
        assert bool(argv.get("--channels-last")) == channels_last, name
        assert not optimiser_flags & set(argv), name  # plain SGD: main.py's defaults
        assert not {"--label-smoothing", "--color-jitter", "--cudnn-benchmark"} & set(argv), name
        assert "--model-source" not in argv and "--synthetic-data" not in argv, name

    noio = entries["resnet50-noio"]
    argv = dict(noio.argv)
    assert noio.parity == "same" and argv["--image-size"] == 244
    assert argv["--synthetic-data"] is argv["--fixed-batch"] is argv["--soft-targets"] is True
    assert argv["--normalise-in-workers"] is argv["--cast-inputs"] is True  # randn, cast
    assert argv["--precision"] == "tf32-fp16" and argv["--channels-last"] is True

    focalnet = entries["focalnet"]
    argv = dict(focalnet.argv)
    assert focalnet.parity == "same"
    assert (argv["--model-source"], argv["--model"], argv["--batch-size"]) == (
        "timm", "focalnet_base_lrf", 128,
    )  # fmt: skip
    assert argv["--precision"] == "tf32-bf16"  # --amp-dtype bfloat16; train.py turns TF32 on
    assert (argv["--momentum"], argv["--weight-decay"], argv["--label-smoothing"]) == (
        0.9, 2e-5, 0.1,
    )  # fmt: skip
    assert argv["--nesterov"] is argv["--no-bias-decay"] is True
    assert argv["--color-jitter"] == 0.4 and argv["--random-interpolation"] is True
    assert argv["--cudnn-benchmark"] is True and argv["--lr"] == 0.05  # 0.1 x 128 / 256
    assert "--normalise-in-workers" not in argv  # timm's prefetcher normalises on the GPU
    assert argv["--num-workers"] == upstream_workers

    for name in ("lightning", "lightning-gpus"):
        entry = entries[name]
        argv = dict(entry.argv)
        assert entry.parity == "same", name
        assert (argv["--model"], argv["--batch-size"]) == ("resnet152", 256), name
        assert (argv["--precision"], argv["--optimizer"], argv["--lr"]) == (
            "tf32-bf16", "adam", 0.001,
        ), name  # fmt: skip
        assert argv["--normalise-in-workers"] is True, name
        assert argv["--num-workers"] == upstream_workers, name


@pytest.mark.slow
@pytest.mark.parametrize("data", ["jpeg", "synthetic"])
def test_torchvision_loop_with_the_plain_model(data, jpegs, python):
    """The loader's defaults (normalised on the device, hard targets), which no entry of
    the smoke run uses."""
    extra = {
        "jpeg": ["--data", jpegs],
        "synthetic": ["--synthetic-data", "--fixed-batch"],
    }[data]
    run = run_with_pipe([python, "main.py", *PLAIN, *extra], bench_env(stop=3, skip=1),
                        BENCHMARKS / "torchvision")  # fmt: skip
    check_budget(run, 3, "items/s")
    decl = [r for r in run.records if "flops_per_item" in r]
    assert len(decl) == 1 and decl[0]["flops_source"] == "counted"


# the standard suite's resnet50, resnet50-noio and focalnet options on the plain model
SMOKE_TORCHVISION = {
    "jpeg-upstream": ("resnet50", "jpeg data"),  # UPSTREAM_LOADER
    "noio-upstream": ("resnet50-noio", "synthetic data"),  # + soft targets
    "jpeg-timm": ("focalnet", "jpeg data"),  # TIMM_RECIPE
}


@pytest.mark.parametrize("data", list(SMOKE_TORCHVISION))
def test_torchvision_loop_standard_options(data, smoke: SmokeRun):
    """Reads the session's smoke run (entries resnet50, resnet50-noio, focalnet: the
    standard suite's options with --model-source plain, fp32 on cpu)."""
    entry, source = SMOKE_TORCHVISION[data]
    smoke.check_measured(entry, "items/s")
    decl = smoke.declared_flops(entry)
    assert len(decl) == 1 and (decl[0]["flops_source"], decl[0]["precision"]) == (
        "counted", "fp32",
    )  # fmt: skip
    out = smoke.stdout_of(entry)
    assert "plain resnet-tiny" in out and f"x 1, fp32, {source} on cpu" in out


def test_torchvision_ddp_two_ranks(smoke: SmokeRun):
    """Reads the session's smoke run (entry resnet152-ddp-gpus: torchrun, 2 gloo ranks,
    the plain model on the JPEG folder)."""
    smoke.check_measured("resnet152-ddp-gpus", "items/s")
    decl = smoke.declared_flops("resnet152-ddp-gpus")
    assert len(decl) == 1 and decl[0]["flops_source"] == "counted"  # rank 0 alone writes
    out = smoke.stdout_of("resnet152-ddp-gpus")
    assert "batch 8 per device x 2" in out and "jpeg data" in out


@pytest.mark.slow
def test_lightning_one_process(jpegs, python):
    """Images normalised on the device (the smoke run's lightning entries normalise in
    the loader workers: test_lightning_one_process_workers)."""
    pytest.importorskip("lightning")
    run = run_with_pipe([python, "main.py", *PLAIN, "--data", jpegs],
                        bench_env(stop=3, skip=1), BENCHMARKS / "lightning")  # fmt: skip
    check_budget(run, 3, "items/s")
    assert "32-true" in run.stdout


def test_lightning_one_process_workers(smoke: SmokeRun):
    """Reads the session's smoke run (entry lightning: one process, images normalised in
    the loader workers, fp32)."""
    smoke.check_measured("lightning", "items/s")
    decl = smoke.declared_flops("lightning")
    assert len(decl) == 1 and (decl[0]["flops_source"], decl[0]["precision"]) == (
        "counted", "fp32",
    )  # fmt: skip
    assert "x 1, fp32 (32-true) on cpu" in smoke.stdout_of("lightning")


def test_lightning_ddp_two_ranks(smoke: SmokeRun):
    """Reads the session's smoke run (entry lightning-gpus: torchrun, 2 gloo ranks)."""
    smoke.check_measured("lightning-gpus", "items/s")
    decl = smoke.declared_flops("lightning-gpus")
    assert len(decl) == 1  # rank 0 declares
    assert "x 2, fp32 (32-true) on cpu" in smoke.stdout_of("lightning-gpus")


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
