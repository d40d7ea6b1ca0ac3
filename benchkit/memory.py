"""Will an entry fit? Its memory per GPU and per node, estimated from its model built on
the meta device, and the start-of-run check that skips an entry that will not fit.

The estimate runs one training step of the entry's real model on meta tensors at the
configured batch (`measure_step`). Per GPU (`Footprint`): weights (whole, or the rank's
shard under FSDP), gradients and optimiser state of what trains, activations (the peak of
live tensors of one forward + backward, gradients excluded, recomputed blocks included)
or, when larger, the temporaries of the optimiser's step, and ``other`` (what the
parallelism adds, frozen models, caches): the tensors; and what no tensor accounts for, as
a GPU reports it in use: `GPU_CONTEXT` (plus `NCCL_CONTEXT` on a job of several ranks) and
`ALLOCATOR_SLACK` of the tensors. The tensors are known within `ESTIMATE_BAND`: an entry
is skipped only when it cannot fit at the band's low end (`does_not_fit`), and runs with
a warning when it fits there but not at the high end (`tight_fit`). Per node: every rank's
`HOST_RUNTIME` plus what it materialises in host memory while it starts or trains;
DataLoader workers and page cache are not counted. What each part holds, and why the meta
device: docs/benchmarks.md "Memory: does an entry fit?".

Standard library at module level (benchkit's rule); torch only inside the functions.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from benchkit.accelerators import fake_gpus
from benchkit.hostmem import HOST_MEMORY_VARIABLE, host_bytes, host_may_grow, host_override

GIB = 2**30
#: GPU memory in use that no tensor of the step accounts for: the CUDA context, the loaded
#: kernels, cuBLAS's and cuDNN's handles and workspaces. Measured on an H200 (torch 2.11,
#: nine entries): 0.73-0.76 GiB in use beyond what the caching allocator reserved;
#: upstream's H100 observations at batch 1 hold 1.25-1.7 GiB beyond the estimate's
#: tensors, the allocator's first segments included (docs/benchmarks.md).
GPU_CONTEXT = GIB
#: What a rank of a job over several GPUs adds to it: NCCL's communicators and buffers
#: (upstream's H100 at batch 1: lightning-gpus 1.7 GiB over lightning).
NCCL_CONTEXT = 3 * GIB // 2
#: The caching allocator's share, as a fraction of the tensors: sizes rounded up to its
#: blocks, freed blocks kept for reuse (what a GPU reports in use and no tensor holds).
#: Measured on an H200: reserved over allocated at the peak, 1.04 to 1.13 (nine entries,
#: 1.09 on average).
ALLOCATOR_SLACK = 0.08
#: How far the estimate's tensors may be from what a GPU holds, as ratios (estimate over
#: measure, once `GPU_CONTEXT` and `ALLOCATOR_SLACK` are taken out): every entry that does
#: the same work as upstream lands within it against upstream's observations
#: (tests/benchmarks/test_memory_estimates.py).
ESTIMATE_BAND = (0.85, 1.15)
#: Host memory of one rank before it builds anything: interpreter, torch and the CUDA
#: libraries (about 1.5-2.5 GiB of RSS for a CUDA build of torch).
HOST_RUNTIME = 2 * GIB
#: What the suites are sized for: an 80 GB GPU (the fake GPUs' 81920 MiB) and 1 TiB of
#: host memory for a node of 8 GPUs.
REFERENCE_GPU = 81920 * 2**20
REFERENCE_HOST = 2**40
REFERENCE_GPUS_PER_NODE = 8

#: `estimate_entry` sets it to the entry's options (world size aside) while it estimates:
#: entries that differ only by their world size (-single, -gpus, -nodes) measure the
#: step of their model once per process (`_STEPS`).
_SAME_STEP: Any = None
_STEPS: dict[Any, Any] = {}

#: Optimiser state per trained weight, in units of the weight's own size.
OPTIMIZER_STATES = {
    "adamw": 2, "adam": 2, "adamw-foreach": 2, "adam-foreach": 2, "sgd-momentum": 1,
    "sgd": 0, "none": 0,
}  # fmt: skip
#: Temporaries of the optimiser's step, in units of the trained weights' size: torch's
#: multi-tensor (foreach) Adam and AdamW make ``sqrt(exp_avg_sq)`` of every tensor at
#: once (the fused kernels and the CPU's per-tensor loop make none worth counting).
#: ``adam`` and ``adamw`` are the fused kernels; ``torch.optim.Adam(params)`` without
#: ``fused=True`` runs the foreach ones on a GPU (torch's default there): ``-foreach``.
OPTIMIZER_TEMPORARIES = {"adamw-foreach": 1, "adam-foreach": 1}


def gib(n: float) -> str:
    """Bytes as GiB with one decimal (``12.3``)."""
    return f"{n / GIB:.1f}"


@dataclass(frozen=True)
class Footprint:
    """Bytes one GPU and one node need for an entry (the module docstring says what
    each part holds). ``host_startup`` and ``host_run`` are per rank, without
    `HOST_RUNTIME`; ``ranks_per_node`` processes share the node's host memory; ``world``
    ranks make the job (more than one: NCCL's buffers on every GPU)."""

    params: int = 0
    grads: int = 0
    optimizer: int = 0
    activations: int = 0
    other: int = 0
    optimizer_step: int = 0
    host_startup: int = 0
    host_run: int = 0
    ranks_per_node: int = 1
    world: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def tensors(self) -> int:
        """The tensors one GPU holds at the peak of a step. The optimiser step's
        temporaries come after the backward has freed the activations: the larger of the
        two counts."""
        return (
            self.params + self.grads + self.optimizer + self.other
            + max(self.activations, self.optimizer_step)
        )  # fmt: skip

    @property
    def context(self) -> int:
        """`GPU_CONTEXT`, and `NCCL_CONTEXT` when the job has several ranks."""
        return GPU_CONTEXT + (NCCL_CONTEXT if self.world > 1 else 0)

    def in_use(self, tensors: float) -> int:
        """The memory a GPU reports in use while it holds ``tensors`` bytes."""
        return self.context + math.ceil(tensors * (1 + ALLOCATOR_SLACK))

    @property
    def per_gpu(self) -> int:
        """What one GPU reports in use at the peak of a step: the tensors, the
        allocator's share, the context."""
        return self.in_use(self.tensors)

    @property
    def per_gpu_range(self) -> tuple[int, int]:
        """`per_gpu` at the two ends of `ESTIMATE_BAND`: the least and the most the entry
        may need."""
        low, high = ESTIMATE_BAND
        return self.in_use(self.tensors / high), self.in_use(self.tensors / low)

    @property
    def host_per_rank(self) -> int:
        """Host memory of one rank at its largest (start-up or training)."""
        return HOST_RUNTIME + max(self.host_startup, self.host_run)

    @property
    def startup_per_rank(self) -> int:
        """Host memory of one rank while it builds and materialises its model."""
        return HOST_RUNTIME + self.host_startup

    @property
    def host_per_node(self) -> int:
        """Host memory of the node: every rank at its largest, together."""
        return self.ranks_per_node * self.host_per_rank

    def gpu_line(self) -> str:
        """``61.2 GiB per GPU (weights 14.0, gradients 0.1, ...)``."""
        return (
            f"{gib(self.per_gpu)} GiB per GPU (weights {gib(self.params)}, gradients "
            f"{gib(self.grads)}, optimiser {gib(self.optimizer)}, activations "
            f"{gib(self.activations)}, other {gib(self.other)}, "
            + (f"optimiser step {gib(self.optimizer_step)}, " if self.optimizer_step else "")
            + f"context {gib(self.context)}, allocator {gib(self.per_gpu - self.context - self.tensors)}"
            + f"; band {gib(self.per_gpu_range[0])} to {gib(self.per_gpu_range[1])})"
        )

    def host_line(self) -> str:
        """``96.0 GiB of host memory per node (12.0 GiB per rank x 8)``."""
        return (
            f"{gib(self.host_per_node)} GiB of host memory per node ({gib(self.host_per_rank)} "
            f"GiB per rank x {self.ranks_per_node}; start-up {gib(self.startup_per_rank)} "
            f"GiB per rank)"
        )

    def as_dict(self) -> dict[str, Any]:
        """The parts and the totals, in bytes (what the skip record carries)."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        out.update(
            tensors=self.tensors,
            context=self.context,
            per_gpu=self.per_gpu,
            per_gpu_range=list(self.per_gpu_range),
            host_per_rank=self.host_per_rank,
            startup_per_rank=self.startup_per_rank,
            host_per_node=self.host_per_node,
        )
        return out


def does_not_fit(fp: Footprint, *, gpu_bytes: int | None, host_bytes: int | None) -> str | None:
    """One line saying why ``fp`` does not fit a GPU of ``gpu_bytes`` and a node of
    ``host_bytes`` (None: not checked), with the numbers; None when it fits. On the GPU,
    it does not fit only when even the low end of its range (`ESTIMATE_BAND`) is over
    the GPU's memory: an estimate errs, and a skipped entry scores nothing."""
    if gpu_bytes is not None and fp.per_gpu_range[0] > gpu_bytes:
        return f"needs {fp.gpu_line()}, the GPU has {gib(gpu_bytes)} GiB"
    if host_bytes is not None and fp.host_per_node > host_bytes:
        return f"needs {fp.host_line()}, the node has {gib(host_bytes)} GiB"
    return None


def tight_fit(fp: Footprint, *, gpu_bytes: int | None) -> str | None:
    """One line when ``fp`` fits a GPU of ``gpu_bytes`` at the low end of its range but
    not at the high end (it may run out of memory), with the estimate and the GPU's
    memory; None otherwise."""
    if gpu_bytes is None:
        return None
    low, high = fp.per_gpu_range
    if high <= gpu_bytes or low > gpu_bytes:  # fits whatever the error, or does not fit
        return None
    return (
        f"may not fit: needs {fp.gpu_line()}, the GPU has {gib(gpu_bytes)} GiB; "
        "running (skipped only when the low end is over)"
    )


# -- sizes of modules -------------------------------------------------------------------


def unique_params(modules: Iterable[Any]) -> list[Any]:
    """The parameters of ``modules``, each once (tied weights are one tensor)."""
    seen: set[int] = set()
    out = []
    for module in modules:
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def nbytes(tensors: Iterable[Any]) -> int:
    """Bytes of ``tensors`` at their global shape (a DTensor counts whole)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def buffer_bytes(modules: Iterable[Any]) -> int:
    seen: set[int] = set()
    total = 0
    for module in modules:
        for b in module.buffers():
            if id(b) not in seen:
                seen.add(id(b))
                total += b.numel() * b.element_size()
    return total


def optimizer_bytes(trained: Iterable[Any], optimizer: str) -> int:
    """State of ``optimizer`` (`OPTIMIZER_STATES`) for the ``trained`` parameters."""
    try:
        states = OPTIMIZER_STATES[optimizer]
    except KeyError:
        raise ValueError(
            f"optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZER_STATES)}"
        ) from None
    return states * nbytes(trained)


# -- one step on meta tensors ------------------------------------------------------------


@dataclass(frozen=True)
class StepMemory:
    """What one step made, in bytes: ``peak`` of the live tensors it made that are not
    gradients of parameters (activations, temporaries, recomputed blocks), ``grads``
    still held by parameters at the end, ``retained`` everything else still alive."""

    peak: int
    grads: int
    retained: int


class LiveBytes:
    """Counts the bytes of the tensors that operators make while it is active, and their
    peak, releasing each when its storage dies (weak references: nothing is kept alive).

    Works on any device: on meta tensors it measures a step that never runs; on the CPU
    it measures what a start-up really materialises (``meta=False``: meta tensors, which
    hold no memory, are then not counted). Gradients handed to parameters can be set
    apart (`set_apart`) so that the peak is of activations alone."""

    def __init__(self, *, meta: bool = True) -> None:
        import weakref

        from torch.utils._python_dispatch import TorchDispatchMode

        self._weakref = weakref
        self._meta = meta
        self.live = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}  # id(storage) -> counted bytes
        self._refs: dict[int, Any] = {}
        self._apart: set[int] = set()
        owner = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                # a view or an in-place result shares an input's storage: nothing new
                inputs = {id(s) for s in owner._storages((args, kwargs))}
                for storage in owner._storages(out):
                    if id(storage) not in inputs:
                        owner._add(storage)
                return out

        self._mode = _Mode()

    @staticmethod
    def _storages(value: Any) -> Iterator[Any]:
        """The storages of the tensors in ``value``; a wrapper tensor (a DTensor, a
        sharded parameter) stands for the tensors it wraps (its local shard)."""
        import torch
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass

        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, list | tuple):
                stack.extend(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif is_traceable_wrapper_subclass(item):
                names, _ctx = item.__tensor_flatten__()
                stack.extend(getattr(item, name) for name in names)
            elif isinstance(item, torch.Tensor):
                try:
                    yield item.untyped_storage()
                except (RuntimeError, NotImplementedError):  # subclasses without storage
                    continue

    def _add(self, storage: Any) -> None:
        key = id(storage)
        if key in self._sizes:
            return
        size = storage.nbytes()
        if size == 0 or (not self._meta and storage.device.type == "meta"):
            return
        self._sizes[key] = size
        self._refs[key] = self._weakref.ref(storage, lambda _ref, k=key: self._release(k))
        self.live += size
        self.peak = max(self.peak, self.live)

    def _release(self, key: int) -> None:
        size = self._sizes.pop(key, 0)
        self._refs.pop(key, None)
        if key in self._apart:
            self._apart.discard(key)
        else:
            self.live -= size

    def set_apart(self, tensor: Any) -> int:
        """Stop counting ``tensor``'s storage in ``live`` (a gradient); returns its bytes."""
        key = id(tensor.untyped_storage())
        if key not in self._sizes or key in self._apart:
            return 0
        self._apart.add(key)
        self.live -= self._sizes[key]
        return self._sizes[key]

    def __enter__(self) -> LiveBytes:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)


def measure_step(step: Callable[[], Any], params: Iterable[Any] = ()) -> StepMemory:
    """Run ``step`` (one forward + backward, typically on meta tensors) and measure the
    peak of the tensors it makes, the gradients of ``params`` set apart as they are
    accumulated. Gradients left by earlier calls are dropped first."""
    import gc

    params = [p for p in params if p.requires_grad]
    for p in params:
        p.grad = None
    counter = LiveBytes()
    grads = {"bytes": 0}

    def accumulated(p: Any) -> None:
        if p.grad is not None:
            grads["bytes"] += counter.set_apart(p.grad)

    hooks = [p.register_post_accumulate_grad_hook(accumulated) for p in params]
    try:
        with counter:
            step()
        gc.collect()
    finally:
        for h in hooks:
            h.remove()
    grad_bytes = nbytes(p.grad for p in params if p.grad is not None)
    for p in params:
        p.grad = None
    return StepMemory(peak=counter.peak, grads=grad_bytes, retained=max(0, counter.live))


# -- assembling a training footprint -----------------------------------------------------


def training_footprint(
    *,
    trained: Iterable[Any],
    frozen: Iterable[Any] = (),
    step: StepMemory,
    optimizer: str = "adamw",
    parallel: str = "none",
    world: int = 1,
    ranks_per_node: int = 1,
    cpu_offload: bool = False,
    units: Iterable[Any] = (),
    built_on: str = "host",
    extra_gpu: int = 0,
    notes: Iterable[str] = (),
) -> Footprint:
    """The footprint of training the modules ``trained`` (their trainable parameters
    learn, the rest of them is frozen weight) next to the ``frozen`` modules (teachers,
    references: weights only), given the ``step`` measured on the meta device.

    ``parallel``: ``none``, ``ddp`` (a bucket per gradient: gradients count twice) or
    ``fsdp`` (weights, gradients and optimiser state sharded over ``world`` ranks, plus
    two gathered ``units`` (the FSDP units, e.g. decoder layers: the current one and the
    prefetched next) and one unit's unsharded gradients; with ``cpu_offload`` the shards
    live in host memory instead). ``built_on``: where a rank makes its weights while it
    starts: ``host`` (built on the CPU, then moved: all of them pass through host
    memory), ``device`` (built on the GPU: none) or ``meta`` (built on the meta device,
    then only the rank's shards materialised: in host memory with ``cpu_offload``, else
    on the GPU). ``extra_gpu``: anything else on the GPU (a cache). ``optimizer``: a key
    of `OPTIMIZER_STATES`; the temporaries of its step (`OPTIMIZER_TEMPORARIES`, sharded
    as the state is) are ``optimizer_step``, which `Footprint.per_gpu` sets against the
    activations (the step comes after the backward)."""
    if built_on not in ("host", "device", "meta"):
        raise ValueError(f"built_on {built_on!r}: expected host, device or meta")
    if parallel not in ("none", "ddp", "fsdp"):
        raise ValueError(f"parallel {parallel!r}: expected none, ddp or fsdp")
    if world < 1 or ranks_per_node < 1:
        raise ValueError(f"world {world}, ranks_per_node {ranks_per_node}: expected >= 1")
    trained = list(trained)
    frozen = list(frozen)
    params = unique_params(trained)
    learn = [p for p in params if p.requires_grad]
    weights = nbytes(params) + buffer_bytes(trained)
    grads = nbytes(learn)
    state = optimizer_bytes(learn, optimizer)
    step_temporaries = OPTIMIZER_TEMPORARIES.get(optimizer, 0) * grads
    frozen_bytes = nbytes(unique_params(frozen)) + buffer_bytes(frozen)
    activations = max(0, step.peak)
    other = frozen_bytes + extra_gpu
    host_startup = weights + frozen_bytes if built_on == "host" else 0
    host_run = 0
    if parallel == "ddp":
        other += grads  # the gradient buckets of the reducer
    elif parallel == "fsdp":
        shard = math.ceil
        unit_sizes = [nbytes(unique_params([u])) for u in units] or [0]
        unit_grads = [nbytes(p for p in unique_params([u]) if p.requires_grad) for u in units]
        gathered = 2 * max(unit_sizes) + max(unit_grads or [0])
        weights, grads, state = (shard(x / world) for x in (weights, grads, state))
        step_temporaries = shard(step_temporaries / world)
        other += gathered
        if cpu_offload:
            host_run = weights + grads + state
            if built_on == "meta":
                host_startup = weights  # the rank's shards, made in host memory
            weights = grads = state = step_temporaries = 0  # the step runs on the CPU
    return Footprint(
        params=weights,
        grads=grads,
        optimizer=state,
        activations=activations,
        other=other,
        optimizer_step=step_temporaries,
        host_startup=host_startup,
        host_run=host_run,
        ranks_per_node=ranks_per_node,
        world=world,
        notes=tuple(notes),
    )


@dataclass
class Workload:
    """What a benchmark hands `estimate`: the modules it trains (``trained``) and those
    it only runs (``frozen``), built on the meta device, and one training step over the
    configured batch (``step``: forward and backward; it makes its inputs when called,
    on the CPU, where `estimate` turns them into meta tensors).

    A model that is a stack of ``depth`` identical blocks may also say how to build the
    same workload with fewer of them (``at_depth(n)``): `estimate` then measures the
    step at a few small depths and extrapolates (`step_by_depth`)."""

    trained: list[Any]
    step: Callable[[], Any]
    frozen: list[Any] = field(default_factory=list)
    depth: int = 0
    at_depth: Callable[[int], Workload] | None = None


AMP_DTYPES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "tf32-fp16": "float16",
    "tf32-bf16": "bfloat16",
}


def as_fake_cpu(modules: Iterable[Any], mode: Any) -> None:
    """Replace, in place, the meta parameters and buffers of ``modules`` by fake CPU
    tensors of ``mode`` (meta storage, CPU dispatch: autocast applies). Tied weights stay
    tied. (Building under the fake mode directly fails: modules that move their weights
    with ``.to()``, as peft's adapters do, cannot swap fake parameters.)"""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    cpu = torch.device("cpu")
    memo: dict[int, Any] = {}

    def fake(t: Any, param: bool) -> Any:
        if id(t) not in memo:
            if t.device.type != "meta":
                raise ValueError(f"expected a model built on the meta device, found {t.device}")
            f = FakeTensor(mode, t.detach(), cpu)
            memo[id(t)] = torch.nn.Parameter(f, requires_grad=t.requires_grad) if param else f
        return memo[id(t)]

    for module in modules:
        for m in module.modules():
            for name, p in list(m._parameters.items()):
                if p is not None:
                    m._parameters[name] = fake(p, True)
            for name, b in list(m._buffers.items()):
                if b is not None:
                    m._buffers[name] = fake(b, False)


#: The depths `step_by_depth` measures: two for the line, a third that must fall on it.
PROBE_DEPTHS = (2, 3, 4)


def step_memory(work: Workload, amp: Any, *, fake: bool = True) -> StepMemory:
    """`measure_step` of ``work``'s step under the autocast of ``amp`` (a dtype or None):
    on fake CPU tensors of a ``FakeTensorMode`` (``work`` built on the meta device), or,
    with ``fake=False``, for real on the tensors ``work`` holds. Either way the step
    runs as a GPU runs it (`as_on_gpu`): the GPU's autocast policy, attention through a
    fused kernel."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode: Any = contextlib.nullcontext()
    if fake:
        mode = FakeTensorMode(allow_non_fake_inputs=True)  # small real tensors welcome
        as_fake_cpu([*work.trained, *work.frozen], mode)
    with mode, as_on_gpu():

        def step() -> None:
            with torch.autocast("cpu", dtype=amp, enabled=amp is not None):
                work.step()

        return measure_step(step, unique_params(work.trained))


# -- a step measured on the CPU as a GPU runs it ------------------------------------------

#: Where a GPU's autocast and the CPU's differ (torch's policies: the CUDA lists of
#: aten/src/ATen/autocast_mode.h against the CPU's of autocast_mode.cpp), the GPU's
#: choice for each operator the CPU's autocast leaves alone: ``fp32`` casts every
#: floating input to float32 (norms, exponentials, powers, interpolation), ``fp32_out``
#: asks for a float32 result when the first input is floating (softmax, sums), ``promote``
#: runs at the widest floating type of the inputs, ``low`` casts to the autocast type
#: (products the CPU does not cast). The CPU runs a softmax or a layer norm of fp16 inputs
#: in fp16; a GPU in fp32, which doubles what their outputs hold.
GPU_AUTOCAST: dict[str, tuple[str, ...]] = {
    "fp32": (
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
        "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
        "pow.Scalar", "softplus", "layer_norm", "native_layer_norm", "group_norm",
        "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim", "cosine_similarity",
        "dist", "pdist", "renorm", "logsumexp", "norm.Scalar", "norm.ScalarOpt_dim",
        "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
        "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
        "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
        "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
    ),
    "fp32_out": (
        "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
        "linalg_matrix_norm", "sum", "sum.dim_IntList",
    ),
    "promote": (
        "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "index_put",
        "tensordot", "scatter_add",
    ),
    "low": ("addmv", "addr", "mv", "einsum", "chain_matmul", "linalg_multi_dot"),
}  # fmt: skip


def _gpu_autocast_kernel(op: Any, policy: str) -> Callable[..., Any]:
    """The CPU autocast kernel of ``op`` (an ``OpOverload``) that applies ``policy`` (a
    key of `GPU_AUTOCAST`) to its inputs, then runs it without autocast."""
    import torch

    names = [a.name for a in op._schema.arguments]
    where = names.index("dtype") if "dtype" in names else len(names)
    skip = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def eligible(value: Any) -> bool:
        return (
            isinstance(value, torch.Tensor)
            and value.is_floating_point()
            and value.dtype is not torch.float64
        )

    def cast(value: Any, dtype: Any) -> Any:
        if eligible(value):
            return value.to(dtype)
        if isinstance(value, list | tuple):
            return type(value)(cast(v, dtype) for v in value)
        return value

    def floats(values: Iterable[Any]) -> Iterator[Any]:
        for value in values:
            if isinstance(value, list | tuple):
                yield from floats(value)
            elif eligible(value):
                yield value

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(skip):
            if policy == "fp32_out":
                if args and eligible(args[0]):
                    if where < len(args):
                        if args[where] is None:
                            args = (*args[:where], torch.float32, *args[where + 1 :])
                    elif kwargs.get("dtype") is None:
                        kwargs["dtype"] = torch.float32
                return op(*args, **kwargs)
            low = torch.get_autocast_dtype("cpu")
            if policy == "fp32":
                dtype = torch.float32
            elif policy == "low":
                dtype = low
            else:  # promote: float32 when any floating input is
                wide = any(t.dtype == torch.float32 for t in floats([args, kwargs.values()]))
                dtype = torch.float32 if wide else low
            args = cast(args, dtype)
            kwargs = {k: cast(v, dtype) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def math_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """Attention as the GPU's math kernel of ``scaled_dot_product_attention`` holds it
    (the kernel a GPU falls back to): inputs at the autocast type, then in float32 (the
    kernel's own upcast of fp16 and bf16), scaled, the score matrix, the mask added, its
    softmax, dropout with a mask of booleans (the GPU's), the product; the result in the
    inputs' type. The same tensors the GPU keeps for the backward, in the same dtypes."""
    import torch

    if torch.is_autocast_enabled("cpu"):  # the autocast kernel casts first
        low = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(low) for t in (query, key, value))
        if isinstance(attn_mask, torch.Tensor) and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(low)
    with torch.autocast("cpu", enabled=False):
        dtype = query.dtype
        if dtype in (torch.float16, torch.bfloat16):
            query, key, value = (t.float() for t in (query, key, value))
        if enable_gqa and key.size(-3) != query.size(-3):
            groups = query.size(-3) // key.size(-3)
            key, value = (t.repeat_interleave(groups, -3) for t in (key, value))
        factor = math.sqrt(scale if scale is not None else 1 / math.sqrt(query.size(-1)))
        scores = (query * factor) @ (key.transpose(-2, -1) * factor)
        if is_causal:
            keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        if isinstance(attn_mask, torch.Tensor):
            if attn_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            else:
                scores.add_(attn_mask)
        weights = torch.softmax(scores, -1)
        if dropout_p > 0:
            weights = torch.native_dropout(weights, dropout_p, True)[0]
        return (weights @ value).to(dtype)


@contextlib.contextmanager
def as_on_gpu() -> Iterator[None]:
    """While it is active, a step on CPU tensors (fake or real) holds the tensors the same
    step holds on a GPU:

    * autocast follows the GPU's policy (`GPU_AUTOCAST`, registered on the CPU's autocast
      for the time of the measure, then removed);
    * ``scaled_dot_product_attention`` with dropout runs without it. A GPU runs attention
      as a fused kernel (flash, memory-efficient, cuDNN) that keeps its output and a
      log-sum-exp and draws its dropout from a seed; the CPU has a fused kernel only
      without dropout or a learned bias, and otherwise materialises the attention matrix,
      its softmax and its dropout mask (twice BERT's activations). Dropout changes no
      size, so the measure is of the GPU's kernel. A mask whose last dimension is strided
      (T5's position bias) is taken by no fused kernel: the GPU runs the math kernel,
      measured as it holds its tensors (`math_attention`);
    * ``dropout`` keeps a mask of booleans, as the GPU's fused kernel (``native_dropout``)
      does, where the CPU's keeps one in the input's dtype (four times as large in fp32);
    * ``backward()`` runs outside autocast, as every benchmark calls it: what a backward
      recomputes (Reformer's reversible layers) is then in fp32, as on the GPU, while
      activation checkpointing restores the forward's autocast by itself.

    An operator the installed torch does not have is left out."""
    import torch
    from torch.overrides import TorchFunctionMode

    sdpa = torch._C._nn.scaled_dot_product_attention  # torch.nn.functional's
    dropout = torch.nn.functional.dropout
    backward = (torch.Tensor.backward, torch.autograd.backward)
    attention = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
    options = {sdpa: (*attention, "enable_gqa"), dropout: ("input", "p", "training", "inplace")}

    class GpuKernels(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in backward:  # as every benchmark calls it: outside autocast
                with torch.autocast("cpu", enabled=False):
                    return func(*args, **(kwargs or {}))
            names = options.get(func)
            if names is None:
                return func(*args, **(kwargs or {}))
            given = dict(zip(names, args, strict=False), **(kwargs or {}))
            if func is dropout:
                p = given.get("p", 0.5)
                if given.get("training", True) and not given.get("inplace", False) and 0 < p < 1:
                    return torch.native_dropout(given["input"], p, True)[0]
                return func(*args, **(kwargs or {}))
            q, k, v = (given.pop(n) for n in names[:3])
            mask = given.get("attn_mask")
            if isinstance(mask, torch.Tensor) and mask.size(-1) > 1 and mask.stride(-1) != 1:
                # no fused kernel takes a mask whose last dimension is strided (T5's
                # position bias): the GPU runs the math kernel
                return math_attention(q, k, v, **given)
            given.pop("dropout_p", None)
            if isinstance(mask, torch.Tensor) and mask.requires_grad:
                # a learned bias: the GPU's memory-efficient kernel takes it, the CPU's
                # fused one only once it is detached
                given["attn_mask"] = mask.detach()
            return func(q, k, v, **given)

    library = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - removed on exit
    try:
        for policy, names in GPU_AUTOCAST.items():
            for name in names:
                base, _, overload = name.partition(".")
                try:
                    op = getattr(getattr(torch.ops.aten, base), overload or "default")
                except (AttributeError, RuntimeError):
                    continue
                library.impl(name, _gpu_autocast_kernel(op, policy), "AutocastCPU")
        with GpuKernels():
            yield
    finally:
        library._destroy()


def by_depth(work: Workload, measure: Callable[[Workload], dict[str, int]]) -> dict[str, int]:
    """``measure(work)`` (whole numbers: bytes, FLOPs), found from shallow copies of
    ``work``'s model when it says how to build them (``Workload.at_depth``) and is deeper
    than they are together.

    Each block of a stack adds the same saved activations, gradients and FLOPs, so every
    figure is a line in the depth: measured at the first two of `PROBE_DEPTHS`, extended
    to ``work.depth``, and trusted only when the third depth falls exactly on it (a model
    whose blocks differ, or a peak that moves from one phase of the step to another with
    the depth, is measured whole instead). A 70B model's 80 layers then cost as much as
    nine: about a second of one core instead of ten to twenty."""
    depth = work.depth
    if work.at_depth is None or depth <= sum(PROBE_DEPTHS):
        return measure(work)
    (d0, d1, d2), (m0, m1, m2) = PROBE_DEPTHS, [measure(work.at_depth(n)) for n in PROBE_DEPTHS]
    out = {}
    for name, a in m0.items():
        b, c = m1[name], m2[name]
        slope = (b - a) // (d1 - d0)
        if a + slope * (d1 - d0) != b or a + slope * (d2 - d0) != c:
            return measure(work)
        out[name] = a + slope * (depth - d0)
    return out


def step_by_depth(work: Workload, amp: Any) -> StepMemory:
    """`step_memory` of ``work``, extrapolated from shallow copies where it can be
    (`by_depth`)."""
    return StepMemory(**by_depth(work, lambda w: asdict(step_memory(w, amp))))


def estimate(
    make: Callable[[], Workload],
    *,
    precision: str | None = None,
    optimizer: str = "adamw",
    parallel: str = "none",
    world: int = 1,
    ranks_per_node: int = 1,
    cpu_offload: bool = False,
    units: Callable[[Workload], Iterable[Any]] | None = None,
    built_on: str = "host",
    extra_gpu: int = 0,
    measured_at: tuple[int, int] | None = None,
) -> Footprint:
    """The `Footprint` of the workload ``make`` builds on the meta device. Its step runs
    under ``FakeTensorMode`` on meta tensors that behave as CPU ones, so that the autocast
    of ``precision`` (bf16, fp16) applies as on a GPU and the activations have the dtypes
    of the real run; nothing is allocated. The arguments after ``make`` are
    `training_footprint`'s; ``units`` picks the FSDP units of the workload.

    ``measured_at=(batch, small)``: for small models whose step depends on its data
    (graphs: sizes found by reading the indices, which meta tensors do not have), ``make``
    builds a real model on the CPU and a real step over ``small`` items; the step runs
    for real and its activations are scaled to ``batch`` items."""
    import torch

    name = AMP_DTYPES.get(precision or "")
    amp = getattr(torch, name) if name else None
    key = None if _SAME_STEP is None else (_SAME_STEP, precision, measured_at)
    if key is not None and key in _STEPS:  # another world size of the same entry
        work, measured = _STEPS[key]
    else:
        work = make()
        real = measured_at is not None
        if real and amp is torch.float16:  # the same sizes; CPUs run fp16 30x slower
            amp = torch.bfloat16
        if real:
            measured = step_memory(work, amp, fake=False)
        else:
            measured = step_by_depth(work, amp)
        if real:  # activations grow with the batch: scaled to the configured one
            batch, small = measured_at
            measured = StepMemory(
                peak=math.ceil(measured.peak * batch / small),
                grads=measured.grads,
                retained=measured.retained,
            )
        if key is not None:
            _STEPS[key] = (work, measured)
    return training_footprint(
        trained=work.trained,
        frozen=work.frozen,
        step=measured,
        optimizer=optimizer,
        parallel=parallel,
        world=world,
        ranks_per_node=ranks_per_node,
        cpu_offload=cpu_offload,
        units=units(work) if units else (),
        built_on=built_on,
        extra_gpu=extra_gpu,
    )


def _import_benchmark_file(path: Any, suffix: str) -> Any:
    """The module at ``path`` (a file of a benchmark folder), imported once under the name
    ``<folder>_<suffix>`` so that the files of several benchmarks can live in one process
    without one ``main`` hiding the others; a failed import leaves no half module behind."""
    import importlib.util

    name = f"{path.parent.name.replace('-', '_')}_{suffix}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def sibling_main(file: str) -> Any:
    """The ``main.py`` next to ``file`` (a benchmark's ``footprint.py``), imported as
    ``<folder>_main``, with the folder on ``sys.path`` for the benchmark's own sibling
    imports (llava's shapes)."""
    from pathlib import Path

    path = Path(file).resolve().with_name("main.py")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return _import_benchmark_file(path, "main")


def ranks() -> tuple[int, int]:
    """(world size, processes sharing this node) of the running benchmark: torchrun's
    ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``; a ``per_gpu`` entry (``MILABENCH_CONFIG``'s
    plan) runs one process per GPU of the node (``MILABENCH_GPU_COUNT``); else 1 and 1."""
    import json

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
    if not local:
        try:
            plan = json.loads(os.environ.get("MILABENCH_CONFIG") or "{}").get("plan") or {}
        except (ValueError, AttributeError):
            plan = {}
        gpus = int(os.environ.get("MILABENCH_GPU_COUNT", "0") or 0)
        local = gpus if isinstance(plan, dict) and plan.get("method") == "per_gpu" else 1
    return world, max(1, local)


# -- the check at the start of a run -----------------------------------------------------


def fake_gpu_bytes(environ: Mapping[str, str] | None = None) -> int | None:
    """Memory of one fake GPU (`benchkit.accelerators.fake_gpus`), None without fakes."""
    spec = fake_gpus(environ)
    return spec.memory_mib * 2**20 if spec is not None else None


def gpu_bytes(device: Any) -> int | None:
    """Memory of the accelerator ``device`` (a ``torch.device``: CUDA and ROCm, XPU),
    None for a CPU or a back-end that does not say (not checked)."""
    fake = fake_gpu_bytes()
    if fake is not None:
        return fake
    kind = getattr(device, "type", None)
    if kind in (None, "cpu", "meta"):
        return None
    import torch

    properties = getattr(getattr(torch, kind, None), "get_device_properties", None)
    if properties is None:
        return None
    try:
        return int(properties(device).total_memory)
    except (AttributeError, RuntimeError, AssertionError):
        return None


def host_reason(fp: Footprint, environ: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """Why ``fp`` does not fit the node's memory (`host_bytes`) and whether that is a
    skip: ("", False) when it fits or is not checked; a skip unless the node's memory
    may grow (`host_may_grow`, and no ``MILABENCH_HOST_MEMORY`` given), when it is a
    warning and the entry runs."""
    given, _ = host_override(environ)
    reason = does_not_fit(fp, gpu_bytes=None, host_bytes=host_bytes(environ))
    if reason is None:
        return "", False
    grows = None if given else host_may_grow()
    if grows is None:
        return reason, True
    return (
        f"may not fit: {reason} now, but {grows} can give it more; running "
        f"({HOST_MEMORY_VARIABLE}=<GiB> states the node's memory)",
        False,
    )


def no_estimate(exc: BaseException, *, label: str = "") -> str:
    """Say, in one line, that the memory estimate failed and the run goes on without it
    (stderr, and rank 0's ``message`` event marked ``warning: memory``, which the report
    lists): the estimate leans on private torch APIs (``torch._subclasses``' fake
    tensors, ``torch.utils._python_dispatch``) that a torch other than the pinned one
    may have changed, which must cost the estimate, never the run. Returns the line."""
    from benchkit.torchsetup import version_cause

    text = (
        f"{label + ': ' if label else ''}no memory estimate ({version_cause(exc)}); "
        "running without it"
    )
    from benchkit.channel import warn

    warn(text, "memory")
    return text


def record_estimate(fp: Footprint, *, label: str = "") -> None:
    """Rank 0 records the estimate of an entry that starts: a ``message`` event marked
    ``estimate: true`` with the footprint under ``memory``, which the report puts beside
    the peak GPU memory measured (``memory_estimate``). Never fails the run."""
    if os.environ.get("RANK", "0") not in ("", "0"):
        return
    try:
        from benchkit.channel import default_writer

        text = f"{label + ': ' if label else ''}memory estimate {gib(fp.per_gpu)} GiB per GPU"
        writer = default_writer()
        writer.event("message", {"message": text, "estimate": True, "memory": fp.as_dict()})
        writer.flush()
    except Exception:  # noqa: BLE001 - a record of the estimate, never a reason to stop
        pass


def skip_unless_it_fits(
    fp: Footprint | Callable[[], Footprint], device: Any, *, label: str = ""
) -> Footprint | None:
    """At the start of a benchmark: when ``fp`` does not fit this node's GPU or host
    memory (`does_not_fit`: not even at the low end of the estimate's range), say why in
    one line with the numbers (stderr, and a ``message`` event marked ``skipped: memory``
    that the report shows as the entry's skip reason) and exit 0; when it fits only at
    the low end (`tight_fit`), or not the node's memory of a VM whose memory can grow
    (`host_reason`), say so the same way, marked ``warning: memory``, and run.
    Every rank decides the same (same options, identical GPUs); rank 0 writes.

    ``fp`` may be a function that estimates it: it is called only on a GPU (or with
    ``MILABENCH_FAKE_GPUS``), where there is something to check; a run on the CPU (the
    tests, the CPU suites) does not pay for the estimate. Returns the footprint, or None
    when it was not estimated; an estimate that fails (a torch whose private APIs
    differ) is one line (`no_estimate`) and None: the run goes on unchecked."""
    capacity = gpu_bytes(device)
    if capacity is None and callable(fp):
        return None
    if callable(fp):
        try:
            fp = fp()
        except Exception as exc:  # noqa: BLE001 - the estimate is optional, the run is not
            no_estimate(exc, label=label)
            return None
    reason = does_not_fit(fp, gpu_bytes=capacity, host_bytes=None)
    host, host_skip = host_reason(fp)
    if reason is None and host_skip:
        reason = host
    if reason is None:
        warning = "; ".join(w for w in (tight_fit(fp, gpu_bytes=capacity), host) if w) or None
        if warning is not None and os.environ.get("RANK", "0") in ("", "0"):
            text = f"{label + ': ' if label else ''}{warning}"
            print(text, file=sys.stderr, flush=True)
            from benchkit.channel import default_writer

            writer = default_writer()
            data = {"message": text, "warning": "memory", "estimate": True, "memory": fp.as_dict()}
            writer.event("message", data)
            writer.flush()
        elif warning is None:
            record_estimate(fp, label=label)
        return fp
    text = f"{label + ': ' if label else ''}{reason}"
    if os.environ.get("RANK", "0") in ("", "0"):
        from benchkit.channel import default_writer

        writer = default_writer()
        writer.event("message", {"message": text, "skipped": "memory", "memory": fp.as_dict()})
        writer.flush()
        print(f"skipped: {text}", file=sys.stderr, flush=True)
    from benchkit.torchsetup import teardown_distributed

    teardown_distributed()  # every rank leaves the same way, its group destroyed
    raise SystemExit(0)


def check_memory(main_file: str, args: Any, device: Any) -> Footprint | None:
    """`skip_unless_it_fits` for the benchmark whose ``main.py`` is ``main_file``: its
    ``footprint.py`` estimates ``args`` on this job's ranks (`ranks`). The one line a
    benchmark's ``main()`` adds once it knows its device, before it builds anything."""
    from pathlib import Path

    folder = Path(main_file).resolve().parent

    def estimate_here() -> Footprint:
        return load_footprint(folder).footprint(args, *ranks())

    return skip_unless_it_fits(estimate_here, device, label=folder.name)


def load_footprint(folder: Any) -> Any:
    """The ``footprint.py`` module of the benchmark in ``folder`` (imported once)."""
    from pathlib import Path

    path = Path(folder).resolve() / "footprint.py"
    if not path.is_file():
        raise SystemExit(f"{path.parent}: no footprint.py (the benchmark's memory estimate)")
    return _import_benchmark_file(path, "footprint")


# -- command line ------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators: steps that draw sizes at random
    (DINOv2's iBOT mask ratios, crop counts) then hold the same activations in every
    estimate, so two entries with the same per-rank work get the same figure."""
    import random

    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed)
    import torch

    torch.manual_seed(seed)


def estimate_entry(folder: str, argv: list[str], world: int, ranks_per_node: int) -> Footprint:
    """The footprint of the benchmark in ``folder`` run with ``argv`` on ``world`` ranks,
    ``ranks_per_node`` processes per node: its ``footprint.py`` given the options its
    ``main.py`` parses."""
    global _SAME_STEP
    module = load_footprint(folder)
    args = sibling_main(module.__file__).parse_args(list(argv))
    # options that change how the run is launched, not what one step holds
    launch = {"threads", "backend", "num_workers", "data", "dataset", "no_stdout"}
    options = tuple(sorted((k, repr(v)) for k, v in vars(args).items() if k not in launch))
    _SAME_STEP = (str(folder), options)
    seed_everything(0)
    try:
        return module.footprint(args, world, ranks_per_node)
    finally:
        _SAME_STEP = None


def main(argv: list[str] | None = None) -> int:
    """``python -m benchkit.memory FOLDER [--world N] [--ranks-per-node N] -- ARGV...``
    prints the footprint of the benchmark in FOLDER run with ARGV, as JSON (bytes), with
    the GPU and host lines; ``--jobs FILE`` (``-``: stdin) reads a JSON list of
    ``{"argv": [...], "world": N, "ranks_per_node": N}`` and prints one result per job
    (``{"footprint": {...}}`` or ``{"error": "one line"}``)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m benchkit.memory", description=main.__doc__)
    parser.add_argument("folder", help="the benchmark's folder (benchmarks/<name>)")
    parser.add_argument("--world", type=int, default=1, help="ranks of the job")
    parser.add_argument("--ranks-per-node", type=int, default=1, help="processes per node")
    parser.add_argument("--jobs", default=None, help="JSON list of jobs (- for stdin)")
    parser.add_argument("argv", nargs="*", help="the benchmark's options (after --)")
    argv = sys.argv[1:] if argv is None else list(argv)
    # the benchmark's options are what follows the first "--", whatever came before it
    # (argparse gives a positional after options nothing once "folder" has taken its turn)
    split = argv.index("--") if "--" in argv else len(argv)
    opts = parser.parse_args(argv[:split])
    opts.argv = opts.argv + argv[split + 1 :]
    if opts.jobs is None:
        fp = estimate_entry(opts.folder, opts.argv, opts.world, opts.ranks_per_node)
        print(json.dumps({"footprint": fp.as_dict(), "gpu": fp.gpu_line(), "host": fp.host_line()}))
        return 0
    text = sys.stdin.read() if opts.jobs == "-" else open(opts.jobs, encoding="utf-8").read()
    results = []
    for job in json.loads(text):
        try:
            fp = estimate_entry(opts.folder, job["argv"], job["world"], job["ranks_per_node"])
            results.append(
                {"footprint": fp.as_dict(), "gpu": fp.gpu_line(), "host": fp.host_line()}
            )
        except (Exception, SystemExit) as err:  # one line per job that could not be estimated
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            results.append({"error": f"{type(err).__name__}: {first}"})
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
