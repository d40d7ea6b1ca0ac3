"""`benchkit.memory`: the live-tensor counter on meta tensors, the step measurement
(gradients set apart, activation checkpointing seen, the GPU's autocast, attention and
dropout kernels), the footprint arithmetic of each parallelism, what a GPU reports in
use, the skip rule and its warning, the one-line reason. (The start-of-run skip of a
real benchmark is in tests/benchmarks/test_llm_finetune.py; the estimates against
upstream's observations in tests/benchmarks/test_memory_estimates.py.)"""

from __future__ import annotations

import json
import math

import pytest

from benchkit import memory
from benchkit.memory import (
    ALLOCATOR_SLACK,
    ESTIMATE_BAND,
    GIB,
    GPU_CONTEXT,
    HOST_RUNTIME,
    NCCL_CONTEXT,
    Footprint,
    LiveBytes,
    StepMemory,
    does_not_fit,
    fake_gpu_bytes,
    measure_step,
    tight_fit,
    training_footprint,
)

torch = pytest.importorskip("torch")


def test_views_and_inputs_are_not_new_memory():
    a = torch.empty(1024, 1024, device="meta")  # 4 MiB, made before counting
    with LiveBytes() as live:
        v = a.t()  # a view: a's storage
        a.mul_(2)  # in place: a's storage
        b = a * 2  # new: 4 MiB
        assert live.live == 4 * 2**20
        del b
        assert live.live == 0  # released when its storage dies
        c = torch.empty(10, device="meta")
    assert live.peak == 4 * 2**20 and v.shape == (1024, 1024) and c.numel() == 10


def _mlp(width: int = 256, depth: int = 4) -> torch.nn.Module:
    with torch.device("meta"):
        return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])


def test_step_sets_gradients_apart_and_sees_checkpointing():
    from torch.utils.checkpoint import checkpoint

    model = _mlp(256, 16)
    x = torch.empty(4096, 256, device="meta")

    def run(layers) -> torch.Tensor:
        h = layers[0]
        for layer in layers[1:]:
            h = torch.relu(layer(h))
        return h

    def plain() -> None:
        run([x, *model]).sum().backward()

    def checkpointed() -> None:  # 4 segments of 4 layers: their inputs are kept
        h = x
        for i in range(0, 16, 4):
            h = checkpoint(lambda a, i=i: run([a, *model[i : i + 4]]), h, use_reentrant=False)
        h.sum().backward()

    full = measure_step(plain, model.parameters())
    ckpt = measure_step(checkpointed, model.parameters())
    grads = 16 * (256 * 256 + 256) * 4
    assert full.grads == ckpt.grads == grads  # set apart: not in the peaks
    act = 4096 * 256 * 4  # one [4096, 256] fp32 activation: 4 MiB
    # without checkpointing every layer keeps its output for the backward
    assert 16 * act <= full.peak <= 20 * act, full.peak / act
    # with it: 4 segment outputs, and one segment's 4 recomputed ones at a time
    assert ckpt.peak <= 0.75 * full.peak, (ckpt.peak / act, full.peak / act)
    assert all(p.grad is None for p in model.parameters())  # left clean


def test_footprint_arithmetic_per_parallelism():
    model = _mlp(1024, 8)  # 8 x (1024 x 1024 + 1024) fp32 = 32.03 MiB
    weights = 8 * (1024 * 1024 + 1024) * 4
    step = StepMemory(peak=100 * 2**20, grads=weights, retained=0)
    one = training_footprint(trained=[model], step=step)
    assert (one.params, one.grads, one.optimizer) == (weights, weights, 2 * weights)
    assert one.activations == 100 * 2**20 and one.other == 0
    assert one.tensors == 4 * weights + 100 * 2**20 and one.world == 1
    assert one.per_gpu == GPU_CONTEXT + math.ceil(one.tensors * (1 + ALLOCATOR_SLACK))
    assert one.host_startup == weights  # built on the host, then moved
    ddp = training_footprint(trained=[model], step=step, parallel="ddp", world=8)
    assert ddp.other == weights  # the reducer's buckets
    assert ddp.context == GPU_CONTEXT + NCCL_CONTEXT and ddp.world == 8
    fsdp = training_footprint(
        trained=[model], step=step, parallel="fsdp", world=8, ranks_per_node=8,
        units=list(model), built_on="meta",
    )  # fmt: skip
    unit = (1024 * 1024 + 1024) * 4
    assert fsdp.params == weights // 8 and fsdp.optimizer == 2 * weights // 8
    assert fsdp.other == 3 * unit  # two gathered layers and one layer's full gradients
    assert fsdp.host_startup == 0  # shards made on the GPU
    offload = training_footprint(
        trained=[model], step=step, parallel="fsdp", world=8, ranks_per_node=8,
        units=list(model), built_on="meta", cpu_offload=True,
    )  # fmt: skip
    assert offload.params == offload.grads == offload.optimizer == 0
    assert offload.host_startup == weights // 8  # the rank's shards, in host memory
    assert offload.host_run == 4 * weights // 8
    assert offload.host_per_node == 8 * (HOST_RUNTIME + 4 * weights // 8)
    # torch's foreach AdamW: a copy of the trained weights (here the shard) at the step,
    # after the backward: it replaces the activations at the peak when larger
    foreach = training_footprint(
        trained=[model], step=step, optimizer="adamw-foreach", parallel="fsdp", world=8,
        units=list(model), built_on="meta",
    )  # fmt: skip
    assert foreach.optimizer == fsdp.optimizer and foreach.optimizer_step == weights // 8
    assert foreach.per_gpu == fsdp.per_gpu  # 100 MiB of activations > a 4 MiB shard
    big = StepMemory(peak=2**20, grads=weights, retained=0)
    alone = training_footprint(trained=[model], step=big, optimizer="adamw-foreach")
    assert alone.optimizer_step == weights
    assert alone.tensors == 5 * weights  # the step's copy, not 1 MiB
    assert "optimiser step 0.0, context 1.0" in alone.gpu_line()
    assert one.optimizer_step == 0 and "optimiser step" not in one.gpu_line()
    with pytest.raises(ValueError, match="parallel 'tp'"):
        training_footprint(trained=[model], step=step, parallel="tp")
    with pytest.raises(ValueError, match="optimizer 'lion'"):
        training_footprint(trained=[model], step=step, optimizer="lion")


def test_reason_is_one_line_with_the_numbers():
    fp = Footprint(params=60 * GIB, grads=GIB, optimizer=20 * GIB, activations=20 * GIB,
                   ranks_per_node=8, host_startup=10 * GIB)  # fmt: skip
    reason = does_not_fit(fp, gpu_bytes=80 * GIB, host_bytes=2**40)
    assert reason == (
        "needs 110.1 GiB per GPU (weights 60.0, gradients 1.0, optimiser 20.0, activations "
        "20.0, other 0.0, context 1.0, allocator 8.1; band 95.9 to 129.3), the GPU has 80.0 GiB"
    )
    assert does_not_fit(fp, gpu_bytes=None, host_bytes=2**40) is None
    host = does_not_fit(fp, gpu_bytes=None, host_bytes=64 * GIB)
    assert host.startswith("needs 96.0 GiB of host memory per node (12.0 GiB per rank x 8")
    assert host.endswith("the node has 64.0 GiB") and "\n" not in host


def test_an_entry_is_skipped_only_when_the_low_end_does_not_fit():
    """`per_gpu` is what a GPU reports in use (context, tensors, the allocator's share);
    the estimate's tensors are known within `ESTIMATE_BAND`: skipped when even the least
    the entry may need is over the GPU, a warning when only the most is."""
    fp = Footprint(params=10 * GIB, activations=50 * GIB)
    low, high = fp.per_gpu_range
    assert fp.tensors == 60 * GIB and low < fp.per_gpu < high
    assert low == GPU_CONTEXT + math.ceil(60 * GIB / ESTIMATE_BAND[1] * (1 + ALLOCATOR_SLACK))
    assert high == GPU_CONTEXT + math.ceil(60 * GIB / ESTIMATE_BAND[0] * (1 + ALLOCATOR_SLACK))
    for gpu, skipped, warned in [
        (high, False, False),  # fits whatever the estimate's error
        (high - 1, False, True),  # may not fit: runs, with a warning
        (fp.per_gpu - 1, False, True),  # under the central figure: still runs
        (low, False, True),
        (low - 1, True, False),  # cannot fit even at the low end: skipped
    ]:
        reason = does_not_fit(fp, gpu_bytes=gpu, host_bytes=None)
        warning = tight_fit(fp, gpu_bytes=gpu)
        assert (reason is not None, warning is not None) == (skipped, warned), gpu
    warning = tight_fit(fp, gpu_bytes=fp.per_gpu)
    assert warning.startswith(f"may not fit: needs {fp.gpu_line()}, the GPU has ")
    assert tight_fit(fp, gpu_bytes=None) is None


def recorded_events(monkeypatch) -> list[tuple[str, object]]:
    """The events benchkit's channel receives from here on, as (name, data) pairs."""
    import benchkit.channel

    events: list[tuple[str, object]] = []

    class Writer:
        def event(self, name, data):
            events.append((name, data))

        def flush(self):
            pass

    monkeypatch.setattr(benchkit.channel, "default_writer", lambda: Writer())
    return events


def test_a_tight_fit_runs_with_a_warning_naming_the_numbers(monkeypatch, capsys):
    """At the start of a run: an entry that fits only at the low end of its range is not
    skipped; rank 0 writes one ``message`` marked ``warning: memory`` with the estimate
    and the GPU's memory, and the footprint is returned."""
    events = recorded_events(monkeypatch)
    monkeypatch.delenv("RANK", raising=False)
    fp = Footprint(params=10 * GIB, activations=50 * GIB)
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", f"cuda:1:{fp.per_gpu // 2**20}")
    assert memory.skip_unless_it_fits(fp, "cuda", label="big") is fp
    [(name, data)] = events
    assert name == "message" and data["warning"] == "memory" and "skipped" not in data
    assert data["message"].startswith("big: may not fit: needs "), data["message"]
    assert "the GPU has" in data["message"]
    assert data["memory"]["per_gpu"] == fp.per_gpu
    assert capsys.readouterr().err.strip() == data["message"]
    events.clear()
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", f"cuda:1:{fp.per_gpu_range[0] // 2**20 - 1}")
    with pytest.raises(SystemExit) as exit:
        memory.skip_unless_it_fits(fp, "cuda", label="big")
    assert exit.value.code == 0 and events[0][1]["skipped"] == "memory"


def test_the_node_memory_skips_unless_a_vm_can_grow_it(monkeypatch, capsys):
    """An entry that needs more host memory than the node has is skipped; on a VM whose
    memory can grow past ``MemTotal`` (a bound virtio-mem device: none can exist here,
    so `host_may_grow` answers as on one) it runs with a warning instead; a node's
    memory given in ``MILABENCH_HOST_MEMORY`` is trusted as given."""
    events = recorded_events(monkeypatch)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:1:143771")
    fp = Footprint(params=GIB, host_startup=40 * GIB)  # 42 GiB of host memory
    monkeypatch.setenv("MILABENCH_HOST_MEMORY", "16")
    with pytest.raises(SystemExit) as exit:
        memory.skip_unless_it_fits(fp, "cuda", label="llm")
    assert exit.value.code == 0 and events[0][1]["skipped"] == "memory"
    assert events[0][1]["message"].endswith("the node has 16.0 GiB")
    events.clear()
    monkeypatch.setattr(memory, "host_may_grow", lambda: "virtio-mem")
    with pytest.raises(SystemExit):  # the node's memory was given: no growth assumed
        memory.skip_unless_it_fits(fp, "cuda", label="llm")
    events.clear()
    monkeypatch.setenv("MILABENCH_HOST_MEMORY", "unchecked")
    assert memory.skip_unless_it_fits(fp, "cuda", label="llm") is fp
    assert events[0][1].get("estimate") is True and "warning" not in events[0][1]
    events.clear()
    monkeypatch.delenv("MILABENCH_HOST_MEMORY")
    monkeypatch.setattr(memory, "host_bytes", lambda environ=None: 16 * GIB)
    assert memory.skip_unless_it_fits(fp, "cuda", label="llm") is fp
    [(name, data)] = events
    assert data["warning"] == "memory" and "skipped" not in data
    assert data["message"].startswith("llm: may not fit: needs 42.0 GiB of host memory")
    assert "the node has 16.0 GiB now, but virtio-mem can give it more; running" in data["message"]
    assert "MILABENCH_HOST_MEMORY=<GiB>" in capsys.readouterr().err


def test_an_entry_that_fits_records_its_estimate(monkeypatch):
    """Rank 0 of an entry that fits writes one ``message`` marked ``estimate`` with the
    footprint, for the report to put beside the peak measured; other ranks write none."""
    events = recorded_events(monkeypatch)
    fp = Footprint(params=1 * GIB, activations=2 * GIB)
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:1:143771")
    monkeypatch.delenv("RANK", raising=False)
    assert memory.skip_unless_it_fits(fp, "cuda", label="small") is fp
    [(name, data)] = events
    assert name == "message" and data["estimate"] is True and "warning" not in data
    assert data["memory"]["per_gpu"] == fp.per_gpu
    assert data["message"] == f"small: memory estimate {memory.gib(fp.per_gpu)} GiB per GPU"
    events.clear()
    monkeypatch.setenv("RANK", "1")
    assert memory.skip_unless_it_fits(fp, "cuda", label="small") is fp and events == []


def test_the_step_holds_what_a_gpu_holds():
    """`as_on_gpu` (every measured step): the GPU's autocast policy where the CPU's
    differs (a softmax, a layer norm, an exponential of fp16 inputs give fp32), dropout
    keeping a mask of booleans, attention with dropout through a fused kernel (no
    ``batch x heads x length x length`` matrix), the backward outside autocast; and
    nothing of it once the step is over."""
    f = torch.nn.functional
    x = torch.randn(4, 8, dtype=torch.float16)
    with memory.as_on_gpu(), torch.autocast("cpu", dtype=torch.float16):
        assert torch.softmax(x, -1).dtype == torch.float32
        assert f.layer_norm(x, (8,)).dtype == torch.float32
        assert torch.exp(x).dtype == torch.float32 and x.sum().dtype == torch.float32
        assert torch.addcmul(x, x, x.float()).dtype == torch.float32  # promote
        assert (x.float() @ x.float().t()).dtype == torch.float16  # as before
        assert torch.is_autocast_enabled("cpu")
    with torch.autocast("cpu", dtype=torch.float16):  # the CPU's own policy again
        assert torch.softmax(x, -1).dtype == torch.float16
        assert torch.exp(x).dtype == torch.float16

    def dropout_masks(step) -> int:
        with LiveBytes(meta=False) as live:
            step()
        return live.peak

    big = torch.randn(1024, 1024, requires_grad=True)
    with memory.as_on_gpu():
        gpu = dropout_masks(lambda: f.dropout(big, 0.1).sum())
    cpu = dropout_masks(lambda: f.dropout(big, 0.1).sum())
    # the output and a mask of booleans (and the sum's scalar); the CPU's mask: floats
    assert 5 * 2**20 <= gpu < 5 * 2**20 + 64 < cpu

    q = torch.randn(2, 4, 256, 16, requires_grad=True)
    length = 256 * 256 * 2 * 4 * 4  # one fp32 attention matrix: 2 MiB

    def attention(mask=None):
        def step():
            f.scaled_dot_product_attention(q, q, q, attn_mask=mask, dropout_p=0.1).sum().backward()

        with memory.as_on_gpu():
            return dropout_masks(step)

    assert attention() < length  # fused: no matrix kept
    strided = torch.randn(1, 4, 256, 256).transpose(-1, -2).contiguous().transpose(-1, -2)
    assert strided.stride(-1) != 1
    assert attention(strided) > 2 * length  # the math kernel: softmax and dropout kept

    seen = {}

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            seen["autocast"] = torch.is_autocast_enabled("cpu")
            return g

    with memory.as_on_gpu(), torch.autocast("cpu", dtype=torch.bfloat16):
        Probe.apply(torch.ones(2, requires_grad=True)).sum().backward()
    assert seen == {"autocast": False}  # the benchmarks call backward() outside autocast


def test_fake_gpu_spec_and_ranks(monkeypatch):
    assert fake_gpu_bytes({"MILABENCH_FAKE_GPUS": "cuda:8:81920"}) == 80 * GIB
    assert fake_gpu_bytes({"MILABENCH_FAKE_GPUS": "cuda:8"}) == 80 * GIB
    assert fake_gpu_bytes({"MILABENCH_FAKE_GPUS": ""}) is None and fake_gpu_bytes({}) is None
    with pytest.raises(ValueError, match=r"^MILABENCH_FAKE_GPUS='cuda:8:80G': memory '80G'"):
        fake_gpu_bytes({"MILABENCH_FAKE_GPUS": "cuda:8:80G"})  # not ignored: the parser's error
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:2:1024")
    assert fake_gpu_bytes() == GIB  # the process's own environment
    for key in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "MILABENCH_CONFIG", "MILABENCH_GPU_COUNT"):
        monkeypatch.delenv(key, raising=False)
    assert memory.ranks() == (1, 1)
    monkeypatch.setenv("MILABENCH_GPU_COUNT", "8")
    monkeypatch.setenv("MILABENCH_CONFIG", json.dumps({"plan": {"method": "per_gpu"}}))
    assert memory.ranks() == (1, 8)  # 8 processes on the node, one per GPU
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert memory.ranks() == (16, 8)


def _stack(depth: int, kind: str = "same") -> memory.Workload:
    """A stack of ``depth`` checkpointed blocks (linear + GELU) under a head, built on the
    meta device. ``kind``: ``same`` blocks; ``growing``, block i wider than block i - 1;
    ``alternating``, every other block checkpointed. The last two are no line in the
    depth."""
    growing = kind == "growing"
    from torch.utils.checkpoint import checkpoint

    widths = [64 + (16 * i if growing else 0) for i in range(depth + 1)]
    with torch.device("meta"):
        blocks = torch.nn.ModuleList(
            torch.nn.Linear(widths[i], widths[i + 1]) for i in range(depth)
        )
        head = torch.nn.Linear(widths[-1], 10)
    model = torch.nn.ModuleDict({"blocks": blocks, "head": head})

    def step() -> None:
        h = torch.zeros(512, widths[0])
        for i, block in enumerate(blocks):

            def f(x: torch.Tensor, b: torch.nn.Module = block) -> torch.Tensor:
                return torch.nn.functional.gelu(b(x))

            plain = kind == "alternating" and i % 2
            h = f(h) if plain else checkpoint(f, h, use_reentrant=False)
        head(h).logsumexp(-1).sum().backward()

    return memory.Workload([model], step, depth=depth, at_depth=lambda n: _stack(n, kind))


@pytest.mark.parametrize("kind", ["same", "growing", "alternating"])
def test_a_deep_stack_is_measured_on_shallow_copies_exactly(kind, monkeypatch):
    """The step's figures (memory, FLOPs) of a 24-block stack, extrapolated from copies
    of 2, 3 and 4 blocks, equal the measurement of the whole stack; a stack whose blocks
    differ is not a line in the depth: it is measured whole (the same figures again)."""
    from benchkit.flops import count_flops_on_meta

    measured = []

    def spy(work: memory.Workload) -> dict[str, int]:
        measured.append(work.depth)
        return {"flops": count_flops_on_meta(lambda: memory.Workload(work.trained, work.step))}

    whole = memory.step_memory(_stack(24, kind), None)
    steps, real_step_memory = [], memory.step_memory

    def step_spy(work: memory.Workload, amp: object) -> memory.StepMemory:
        steps.append(work.depth)
        return real_step_memory(work, amp)

    monkeypatch.setattr(memory, "step_memory", step_spy)
    assert memory.step_by_depth(_stack(24, kind), None) == whole
    assert steps == ([2, 3, 4] if kind == "same" else [2, 3, 4, 24])
    assert whole.peak > 0 and whole.grads > 0
    counted = memory.by_depth(_stack(24, kind), spy)["flops"]
    work = _stack(24, kind)
    assert counted == count_flops_on_meta(lambda: memory.Workload(work.trained, work.step)) > 0
    assert measured == ([2, 3, 4] if kind == "same" else [2, 3, 4, 24])


VIT_CASES = {  # benchmark folder: main.py's options (a 12-block ViT-S, small inputs)
    "dinov2": ["--arch", "small", "--batch-size", "2", "--global-size", "56",
               "--local-size", "28", "--local-crops", "2", "--prototypes", "512",
               "--ibot-prototypes", "512", "--head-hidden", "256", "--precision", "fp16"],
    "vjepa": ["--arch", "small", "--predictor", "small", "--batch-size", "2",
              "--frames", "4", "--image-size", "64", "--precision", "bf16"],
}  # fmt: skip


@pytest.mark.parametrize("folder", sorted(VIT_CASES))
def test_the_vit_estimates_from_shallow_copies_are_the_whole_models(folder):
    """DINOv2 (student and teacher, its random iBOT masks drawn once for every copy) and
    V-JEPA (encoder and target cut, the predictor whole) at 12 blocks: the step's memory
    from 2, 3 and 4 blocks equals that of all 12 (the FLOP count takes the same copies,
    `by_depth`)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / folder / "footprint.py"
    spec = importlib.util.spec_from_file_location(f"{folder}_footprint_depth", path)
    footprint = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(footprint)
    args = memory.sibling_main(str(path)).parse_args(VIT_CASES[folder])
    extra = (footprint.masks(args),) if folder == "vjepa" else ()
    amp = torch.float16 if args.precision == "fp16" else torch.bfloat16
    torch.manual_seed(0)
    work = footprint.workload(args, *extra)
    assert work.depth == 12 and work.at_depth is not None
    torch.manual_seed(0)
    full = footprint.workload(args, *extra)  # the same batch, measured whole
    whole = memory.step_memory(memory.Workload(full.trained, full.step, full.frozen), amp)
    assert memory.step_by_depth(work, amp) == whole and whole.peak > 0


def test_the_llm_estimate_from_shallow_copies_is_the_whole_models():
    """The LLM benchmark's model (transformers' Llama with LoRA, checkpointing, bf16
    autocast) at a small width and 12 layers: its step's memory and FLOPs from 2, 3 and
    4 layers equal those of all 12 layers."""
    import importlib.util
    from pathlib import Path

    from benchkit.flops import count_flops_on_meta

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "llm" / "main.py"
    spec = importlib.util.spec_from_file_location("llm_main_depth", path)
    llm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(llm)
    llm.SIZES["test-12"] = (256, 12, 4, 2, 688, 4096)  # hidden, layers, heads, kv, mlp, vocab
    args = llm.parse_args(["--size", "test-12", "--batch-size", "2", "--seq-len", "64",
                           "--lora", "8", "--gradient-checkpointing", "--precision", "bf16"])  # fmt: skip
    work = llm.workload(args)
    assert work.depth == 12 and work.at_depth is not None
    amp = torch.bfloat16
    whole = memory.step_memory(llm.workload(args), amp)
    assert memory.step_by_depth(work, amp) == whole and whole.peak > 0

    def whole_model() -> memory.Workload:
        full = llm.workload(args)
        return memory.Workload(full.trained, full.step)  # no shallow copies: counted whole

    assert count_flops_on_meta(lambda: llm.workload(args), precision="bf16") == (
        count_flops_on_meta(whole_model, precision="bf16")
    )


def test_the_command_line_takes_job_options_before_the_benchmarks(capsys):
    """``python -m benchkit.memory FOLDER --world N --ranks-per-node N -- ARGV``, as the
    docs give it: the job's options before ``--``, the benchmark's after it."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "benchmarks" / "flops"
    argv = [str(folder), "--world", "2", "--ranks-per-node", "2", "--", "--size", "512"]
    assert memory.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["footprint"]["ranks_per_node"] == 2  # flops runs one process per GPU
    assert out["footprint"]["activations"] == 3 * 512 * 512 * 4  # a, b and a @ b in fp32
