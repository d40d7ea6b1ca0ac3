"""benchkit.torchsetup with real torch: options, seeding, threads, precision, one step."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchkit import torchsetup
from benchkit.torchsetup import (
    PRECISIONS,
    add_common_arguments,
    amp_dtype,
    optimizer_step,
    setup,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def parse(argv: list[str], **kwargs) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, **kwargs)
    return parser.parse_args(argv)


def test_common_options_and_defaults():
    args = parse([])
    assert vars(args) == {"precision": "fp32", "device": None, "threads": None, "seed": 0}
    args = parse(["--precision", "bf16", "--device", "cpu", "--threads", "2", "--seed", "7"])
    assert (args.precision, args.device, args.threads, args.seed) == ("bf16", "cpu", 2, 7)
    assert parse([], default_precision="bf16").precision == "bf16"


def test_optional_precision_and_seed():
    args = parse([], precisions=None, seed=False)
    assert vars(args) == {"device": None, "threads": None}
    with pytest.raises(SystemExit):
        parse(["--precision", "fp32"], precisions=None)


def test_precision_choices_are_checked(capsys):
    assert parse(["--precision", "tf32-fp16"], precisions=[*PRECISIONS, "tf32-fp16"])
    with pytest.raises(SystemExit):
        parse(["--precision", "tf32-fp16"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [
        ("fp32", None),
        ("tf32", None),
        ("fp16", torch.float16),
        ("bf16", torch.bfloat16),
        ("tf32-fp16", torch.float16),
        (None, None),
    ],
)
def test_amp_dtype(precision, dtype):
    assert amp_dtype(precision) is dtype


def test_setup_seeds_and_sets_threads(keep_threads):
    args = parse(["--device", "cpu", "--threads", "1", "--seed", "3"])
    run = setup(args)
    first = torch.rand(4)
    assert run.device == torch.device("cpu") and run.amp_dtype is None
    assert torch.get_num_threads() == 1
    setup(args)
    assert torch.equal(torch.rand(4), first)  # same seed, same numbers


def test_setup_without_seed_option_does_not_reseed():
    args = parse(["--device", "cpu"], precisions=None, seed=False)
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    run = setup(args)
    assert torch.equal(torch.rand(3), expected)
    assert run.amp_dtype is None


def test_setup_default_device_and_override():
    assert setup(parse([])).device.type == torchsetup.default_device()
    assert setup(parse(["--device", "meta"]), device=torch.device("cpu")).device.type == "cpu"


def test_bf16_autocast_and_step_train_a_model():
    """A real step: bf16 autocast on CPU, disabled scaler, the loss goes down."""
    run = setup(parse(["--device", "cpu", "--precision", "bf16", "--seed", "0"]))
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = run.grad_scaler()
    assert not scaler.is_enabled()
    x, y = torch.randn(32, 8), torch.randint(0, 2, (32,))
    losses = []
    for _ in range(20):
        with run.autocast():
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
        assert out.dtype is torch.bfloat16
        optimizer_step(loss, opt, scaler)
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_fp32_autocast_is_a_no_op():
    run = setup(parse(["--device", "cpu"]))
    with run.autocast():
        out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype is torch.float32


def test_fp16_enables_the_scaler():
    run = setup(parse(["--device", "cpu", "--precision", "fp16"]))
    assert run.amp_dtype is torch.float16
    assert run.grad_scaler().is_enabled()


def test_module_imports_without_torch():
    """benchkit's rule: standard library only at module level."""
    code = "import sys, benchkit.torchsetup; assert 'torch' not in sys.modules"
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_device_this_torch_cannot_see_is_one_line_and_an_exit(monkeypatch):
    """No silent CPU run: cuda on a CPU build, an absent back-end, a bad name."""
    assert torchsetup.require_device("cpu") == torch.device("cpu")
    assert torchsetup.require_device(torch.device("meta")).type == "meta"
    version = torch.__version__
    cases = {
        "cuda": f"torch {version} cannot see device cuda: ",
        "cuda:1": f"torch {version} cannot see device cuda:1: ",
        "nosuchdevice": f"torch {version}: unknown device 'nosuchdevice': ",
    }
    if torch.version.cuda is None:
        cases["cuda"] += "this build has no CUDA or ROCm support"
    for device, start in cases.items():
        with pytest.raises(SystemExit) as info:
            torchsetup.require_device(device)
        message = str(info.value.code)
        assert message.startswith(start) and "\n" not in message, message
    if not torch.xpu.is_available():
        with pytest.raises(SystemExit, match=r"cannot see device xpu: torch\.xpu\.is_available"):
            torchsetup.require_device("xpu")
    # every path of a benchmark's start goes through the check
    with pytest.raises(SystemExit, match="cannot see device cuda"):
        setup(parse(["--device", "cuda"]))
    with pytest.raises(SystemExit, match="cannot see device cuda"):
        torchsetup.requested_device(parse(["--device", "cuda"]))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match="cannot see device cuda"):
        torchsetup.init_distributed(parse(["--device", "cuda"]))
