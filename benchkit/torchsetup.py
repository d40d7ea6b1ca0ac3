"""The start of every torch benchmark: common options, device, seed, threads, precision.

One module, so that the options every ``benchmarks/<name>/main.py`` shares (``--device
--threads --precision --seed``) and the first lines of its ``main()`` are written once:
copies drift (a forgotten ``cudnn.allow_tf32``, a device default spelled differently).
Scripts keep their own options and models; only this common part lives here.

Only the standard library is imported at module level (benchkit's rule): torch is
imported inside the functions, so ``main.py --help`` stays cheap and this file imports
in an environment without torch.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: ``--precision`` values: fp32 means real fp32 (TF32 off), fp16/bf16 mean autocast.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")

# Autocast dtype name per precision; ``tf32-fp16`` / ``tf32-bf16``: TF32 for what stays
# fp32, fp16 / bf16 autocast for the rest.
_AMP = {"fp16": "float16", "tf32-fp16": "float16", "bf16": "bfloat16", "tf32-bf16": "bfloat16"}
_TF32 = ("tf32", "tf32-fp16", "tf32-bf16")


def default_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _why_unseen(torch: Any, device: Any) -> str | None:
    """Why this torch cannot run on ``device`` (a ``torch.device``), or None when it can."""
    kind, index = device.type, device.index
    if kind in ("cpu", "meta"):
        return None
    if kind == "cuda":
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            return (
                "this build has no CUDA or ROCm support (torch.version.cuda is None); "
                "install a CUDA build of torch, or run with --device cpu"
            )
        count = torch.cuda.device_count()
        if count == 0:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
            return f"no GPU is visible{where}: check the driver (nvidia-smi, rocm-smi)"
        if index is not None and index >= count:
            return f"only {count} GPU(s) are visible"
        return None
    module = getattr(torch, kind, None)
    available = getattr(module, "is_available", None)
    if kind == "mps":
        available = torch.backends.mps.is_available
    if available is None:
        return f"torch has no {kind} back-end in this build"
    if not available():
        return f"torch.{kind}.is_available() is False"
    count_fn = getattr(module, "device_count", None)
    if index is not None and count_fn is not None and index >= count_fn():
        return f"only {count_fn()} {kind} device(s) are visible"
    return None


def require_device(device: Any) -> Any:
    """The ``torch.device`` of ``device`` (a name such as ``cuda`` or ``cuda:1``, or a
    device), once torch has been checked to see it.

    The one check of every torch benchmark: asked for an accelerator this torch cannot
    use (a CPU build, no GPU visible, an index past the last device), it exits with one
    line naming torch's version and the device, never falling back to a silent CPU run::

        torch 2.13.0+cpu cannot see device cuda: this build has no CUDA or ROCm support ...
    """
    import torch

    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SystemExit(f"torch {torch.__version__}: unknown device {device!r}: {first}") from None
    why = _why_unseen(torch, resolved)
    if why is not None:
        raise SystemExit(f"torch {torch.__version__} cannot see device {resolved}: {why}")
    return resolved


def requested_device(args: argparse.Namespace) -> str:
    """``--device`` (default: `default_device`), checked by `require_device`: the device
    kind a script that builds its own per-rank device starts from."""
    kind = getattr(args, "device", None) or default_device()
    require_device(kind)
    return str(kind)


def add_common_arguments(
    parser: argparse.ArgumentParser,
    *,
    precisions: Sequence[str] | None = PRECISIONS,
    default_precision: str = "fp32",
    seed: bool = True,
    threads_help: str = "intra-op CPU threads",
) -> None:
    """Add ``--precision`` (unless ``precisions`` is None), ``--device``, ``--threads``
    and ``--seed`` (unless ``seed`` is false), with the defaults the suites rely on."""
    if precisions is not None:
        parser.add_argument("--precision", choices=list(precisions), default=default_precision)
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if any)")
    parser.add_argument("--threads", type=int, default=None, help=threads_help)
    if seed:
        parser.add_argument("--seed", type=int, default=0)


def amp_dtype(precision: str | None) -> Any:
    """The autocast dtype of a ``--precision`` value, None for no autocast."""
    import torch

    name = _AMP.get(precision or "")
    return getattr(torch, name) if name else None


@dataclass
class Setup:
    """What the common start of ``main()`` decided."""

    device: Any  # torch.device
    amp_dtype: Any  # torch.dtype | None

    def autocast(self) -> Any:
        """Autocast context for the forward pass (a no-op without a mixed precision)."""
        import torch

        return torch.autocast(
            self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None
        )

    def grad_scaler(self) -> Any:
        """Loss scaler, enabled only for fp16 (bf16 and fp32 do not underflow)."""
        import torch

        return torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype is torch.float16)


def setup(args: argparse.Namespace, *, device: Any = None, cudnn_benchmark: bool = False) -> Setup:
    """Seed, pick the device (checked by `require_device`), set the CPU threads and the
    TF32 flags.

    ``device`` overrides ``--device`` (a script that picked a per-rank device itself);
    ``args`` may lack ``--seed`` or ``--precision`` (then: no seeding, no autocast).
    On CUDA, TF32 is allowed only for ``tf32`` precisions, so that fp32 means fp32.
    """
    import torch

    if getattr(args, "seed", None) is not None:
        torch.manual_seed(args.seed)
    device = require_device(device or args.device or default_device())
    if args.threads:
        torch.set_num_threads(args.threads)
    precision = getattr(args, "precision", None)
    if device.type == "cuda":
        allow = precision in _TF32
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow
        if cudnn_benchmark:
            torch.backends.cudnn.benchmark = True
    return Setup(device, amp_dtype(precision))


def optimizer_step(loss: Any, opt: Any, scaler: Any) -> None:
    """One optimiser step from ``loss``: clear the gradients, scaled backward, step."""
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


def init_distributed(args: argparse.Namespace) -> tuple[Any, int, int]:
    """This process's device, rank and world size; under torchrun (``WORLD_SIZE`` set) it
    also joins the process group over ``args.backend`` (default: nccl on CUDA, else gloo).

    One copy for every distributed benchmark: each rank takes the GPU of its
    ``LOCAL_RANK``; CPU ranks share the machine's cores (``args.threads`` defaults to
    cores / local ranks, so that two ranks do not oversubscribe them). Pair it with
    `teardown_distributed` in a ``finally``. Without torchrun: ``(device, 0, 1)``."""
    import torch

    kind = requested_device(args)
    if "WORLD_SIZE" not in os.environ:
        return torch.device(kind), 0, 1
    import torch.distributed as dist

    if kind == "cpu":
        device = torch.device("cpu")
        if not getattr(args, "threads", None):
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
            args.threads = max(1, (os.cpu_count() or 1) // local_world)
    else:
        device = torch.device(kind, int(os.environ.get("LOCAL_RANK", 0)))
        if device.type == "cuda":
            torch.cuda.set_device(device)
    if not dist.is_initialized():
        backend = getattr(args, "backend", None) or ("nccl" if kind == "cuda" else "gloo")
        dist.init_process_group(backend=backend)
    return device, dist.get_rank(), dist.get_world_size()


def teardown_distributed() -> None:
    """Destroy the process group on every exit path (call it in a ``finally``, after
    dropping DDP wrappers: a group destroyed under a live reducer can abort the process at
    exit under load). A group left to interpreter exit can hang (NCCL) or abort (gloo)."""
    import gc

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def version_cause(exc: BaseException) -> str:
    """``torch X: Type: first line`` of an error raised by torch's private APIs: what a
    one-line note says when a figure (a FLOP count, a memory estimate) is given up."""
    try:
        import torch

        version = f"torch {torch.__version__}"
    except Exception:  # noqa: BLE001 - only for the note
        version = "torch ?"
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{version}: {type(exc).__name__}{': ' + first if first else ''}"
