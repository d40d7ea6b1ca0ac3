"""LLM fine-tuning paths of benchmarks/llm at tiny sizes on CPU: LoRA (peft) in one
process, LoRA under DDP and under FSDP2, full fine-tuning under FSDP2 (2 torchrun ranks,
gloo; one run per configuration checks both its training and its sharded start-up),
gradient accumulation, and the analytic FLOPs formula against the counted one.
LoRA in one process and under FSDP2 in fp32 are read from the session's smoke run
(smokerun.py: llm-lora-single, llm-lora-ddp-gpus); the other paths run here."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys

import pytest
from needs import needs

from .conftest import BENCHMARKS, bench_env, run_smuggled, run_with_pipe
from .smokerun import SmokeRun
from .test_mains import check_budget

needs("peft")
TINY = ["--size", "tiny", "--batch-size", "2", "--seq-len", "32", "--device", "cpu"]
# llm-full-mp-*'s options (upstream's llama3_70B_full.yaml), less the 70B shape
FULL_AS_UPSTREAM = ["--shard-embeddings", "--adamw", "foreach", "--param-dtype", "bf16",
                    "--precision", "bf16"]  # fmt: skip


def torchrun() -> str:
    found = shutil.which("torchrun", path=str(sys.executable).rsplit("/", 1)[0])
    found = found or shutil.which("torchrun")
    assert found, "torchrun comes with torch"
    return found


def load_llm_main():
    spec = importlib.util.spec_from_file_location("llm_main", BENCHMARKS / "llm" / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lora_single_trains_only_the_adapters(smoke: SmokeRun):
    """Reads the session's smoke run (entry llm-lora-single: tiny, LoRA rank 8,
    accumulation 2, fp32, activation checkpointing, one process)."""
    smoke.check_measured("llm-lora-single", "Tok/s")
    decl = smoke.declared_flops("llm-lora-single")
    out = smoke.stdout_of("llm-lora-single")
    assert "M trained)" in out and ", single, " in out and "accumulation 2" in out
    assert len(decl) == 1 and (decl[0]["flops_source"], decl[0]["precision"]) == (
        "analytic", "fp32",
    )  # fmt: skip


def check_two_ranks(run, mode: str) -> None:
    """What every 2-rank run must show: the parallel ``mode`` it ran in, one stop event
    (only rank 0 writes) and ranks that left without a torn-down group's complaint."""
    assert f", {mode}, " in run.stdout
    assert len(run.events("stop")) == 1  # only rank 0 writes
    assert "destroy_process_group" not in run.stderr and "terminate called" not in run.stderr


@pytest.mark.slow
def test_two_ranks_lora_ddp(python):
    """LoRA under DDP on 2 gloo ranks (the FSDP2 paths: the sharded test below)."""
    run = run_smuggled(
        [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *TINY,
         "--backend", "gloo", "--gradient-checkpointing", "--lora", "8"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "llm",
    )  # fmt: skip
    check_budget(run, 3, "Tok/s")
    check_two_ranks(run, "ddp")


def test_two_ranks_lora_fsdp(smoke: SmokeRun):
    """LoRA under FSDP2 on 2 gloo ranks. Reads the session's smoke run (entry
    llm-lora-ddp-gpus: tiny, LoRA rank 8, --fsdp, fp32 weights and compute)."""
    smoke.check_measured("llm-lora-ddp-gpus", "Tok/s")
    decl = smoke.declared_flops("llm-lora-ddp-gpus")
    assert len(decl) == 1  # only rank 0 writes (one stop event: SmokeRun.check_measured)
    out = smoke.stdout_of("llm-lora-ddp-gpus")
    assert ", fsdp, " in out and "M trained)" in out
    stderr = smoke.stderr_of("llm-lora-ddp-gpus")
    assert "destroy_process_group" not in stderr and "terminate called" not in stderr


def test_lora_freezes_the_base_and_flops_formula_matches_the_counter():
    import torch

    from benchkit.flops import count_flops

    llm = load_llm_main()
    torch.manual_seed(0)
    for lora in (0, 4):
        model, vocab = llm.make_model("tiny", 16)
        if lora:
            model = llm.add_lora(model, lora)
            trained = {n for n, p in model.named_parameters() if p.requires_grad}
            assert trained and all("lora_" in n for n in trained)
        ids = torch.randint(0, vocab, (2, 16))
        counted = count_flops(lambda m=model, x=ids: m(input_ids=x, labels=x).loss.backward())
        formula = llm.step_flops(model, ids.numel(), bool(lora))
        # matmuls only; the counter also sees attention's score and value products
        assert formula == pytest.approx(counted, rel=0.1), (lora, formula, counted)
        # upstream's batches (each padded to its longest): the per-token average of
        # step_flops over them, weighted by their tokens
        lengths = [16, 40, 7]
        each = [llm.step_flops(model, 2 * n, bool(lora), n) for n in lengths]
        average = sum(each) / sum(2 * n for n in lengths)
        assert llm.flops_per_token(model, bool(lora), lengths) == pytest.approx(average)


MATERIALISED = re.compile(
    r"llm rank (\d+): materialised (\d+) of (\d+) bytes of weights, start-up peak (\d+) bytes"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra, dtype_bytes",
    [
        (["--lora", "8", "--param-dtype", "bf16"], 2),
        (FULL_AS_UPSTREAM, 2),
    ],
    ids=["lora-bf16", "full-upstream"],
)
def test_sharded_ranks_materialise_only_their_shards(extra, dtype_bytes, python):
    """The 70B entries' code path at a tiny size on 2 gloo ranks, FSDP2 with LoRA, as
    upstream's full fine-tuning (embeddings and head sharded apart, foreach AdamW, bf16)
    (in fp32: the next test): the model is built on the meta device, sharded there,
    and each rank then makes its own shards only, in the precision asked for. Every
    tensor a rank makes while it builds is counted (`benchkit.memory.LiveBytes`): the
    most it ever holds is its half of the weights (plus the padding of uneven shards),
    never the whole model. Each run also trains and ends as a 2-rank run must. No case
    with ``--cpu-offload``: on a CPU device main.py turns it off (the shards are in host
    memory already), so such a run is the bf16 case again; offload runs on a GPU only."""
    run = run_smuggled(
        [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *TINY,
         "--backend", "gloo", "--gradient-checkpointing", "--fsdp", *extra],
        bench_env(stop=2, skip=1),
        BENCHMARKS / "llm",
    )  # fmt: skip
    check_budget(run, 2, "Tok/s")
    check_two_ranks(run, "fsdp")
    check_materialised(run.stdout, dtype_bytes)


def test_full_fp32_ranks_materialise_only_their_shards(smoke: SmokeRun):
    """The same in fp32, read from the session's smoke run (entry llm-full-mp-gpus: tiny,
    FSDP2 on 2 gloo ranks, embeddings and head apart, foreach AdamW, fp32 weights)."""
    smoke.check_measured("llm-full-mp-gpus", "Tok/s")
    assert smoke.option("llm-full-mp-gpus", "--param-dtype") == "fp32"
    out = smoke.stdout_of("llm-full-mp-gpus")
    assert ", fsdp, " in out
    stderr = smoke.stderr_of("llm-full-mp-gpus")
    assert "destroy_process_group" not in stderr and "terminate called" not in stderr
    check_materialised(out, 4)


def check_materialised(stdout: str, dtype_bytes: int) -> None:
    """Each of the 2 ranks made its half of the weights (``dtype_bytes`` a parameter),
    and at its start-up peak never held more."""
    found = {int(m[0]): tuple(map(int, m[1:])) for m in MATERIALISED.findall(stdout)}
    assert set(found) == {0, 1}, stdout[-2000:]
    llm = load_llm_main()
    hidden, layers, _heads, kv_heads, intermediate, vocab = llm.SIZES["tiny"]
    for rank, (local, whole, peak) in found.items():
        # the whole model in the asked precision: base weights (+ LoRA adapters)
        assert whole >= dtype_bytes * (2 * vocab * hidden + layers * 3 * hidden * intermediate)
        assert local <= whole / 2 * 1.05, (rank, local, whole)
        assert local >= whole / 2 * 0.90, (rank, local, whole)
        assert peak <= whole / 2 * 1.10, (rank, peak, whole)  # never the whole model


@pytest.mark.slow
def test_an_entry_too_big_for_the_gpu_skips_with_the_numbers(python, tmp_path):
    """The LLM benchmark on a fake GPU of 1 GiB: its estimate (2 GiB of reserve alone)
    does not fit, so it exits 0 at once with a skip that names the numbers; the report
    reads it as skipped (kind ``memory``), not as a failure."""
    from milabench.events import write_events
    from milabench.report.aggregate import file_status
    from milabench.report.outcome import SKIPPED
    from milabench.report.runs import read_file

    run = run_with_pipe(
        [python, "main.py", "--size", "tiny", "--batch-size", "2", "--seq-len", "32",
         "--device", "cpu"],
        bench_env(MILABENCH_FAKE_GPUS="cuda:1:1024"),
        BENCHMARKS / "llm",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    skips = run.events("message")
    assert len(skips) == 1 and skips[0]["$data"]["skipped"] == "memory"
    text = skips[0]["$data"]["message"]
    assert text.startswith("llm tiny: needs ") and text.endswith("the GPU has 1.0 GiB")
    assert "weights" in text and "activations" in text
    assert f"skipped: {text}" in run.stderr
    assert not run.rates()  # nothing was built nor timed
    # as the runner writes it in the run folder: the report calls it a skip
    data = tmp_path / "llm.D0.data"
    write_events(data, [
        {"event": "config", "data": {"name": "llm", "plan": {"method": "per_gpu"}}},
        {"event": "message", "data": skips[0]["$data"], "pipe": "data"},
        {"event": "end", "data": {"return_code": 0, "time": 1.0}},
    ])  # fmt: skip
    fr = read_file(data)
    assert fr.skip_reason == f"skipped: memory ({text})"
    assert file_status(fr, False) == SKIPPED


# -- upstream's torchtune recipes (docs/parity.md: T1 and the LLM rows) ---------------------

#: entry: (size, LoRA rank (0: full fine-tuning), batch, accumulation, lr, FSDP,
#: embeddings and head sharded apart, AdamW kernels), from upstream's config/training.yaml
#: and benchmarks/llm/configs/llama3_8B_lora.yaml, llama3_70B_lora.yaml,
#: llama3_70B_full.yaml
UPSTREAM_RECIPES = {
    "llm-lora-single": ("8b", 8, 8, 8, 3e-4, False, False, "fused"),
    "llm-lora-ddp-gpus": ("8b", 8, 8, 8, 3e-4, True, False, "fused"),
    "llm-lora-ddp-nodes": ("8b", 8, 8, 8, 3e-4, True, False, "fused"),
    "llm-lora-mp-gpus": ("70b", 16, 8, 1, 3e-4, True, False, "fused"),
    "llm-full-mp-gpus": ("70b", 0, 2, 1, 2e-5, True, True, "foreach"),
    "llm-full-mp-nodes": ("70b", 0, 2, 1, 2e-5, True, True, "foreach"),
}


#: entry: (data set, tokenizer), the `benchshared.catalogue` names of upstream's inputs:
#: ``alpaca_cleaned_dataset`` in llama3_8B_lora.yaml, ``alpaca_dataset`` in the 70B ones
UPSTREAM_INPUTS = {
    "llm-lora-single": ("alpaca-cleaned", "llama3.1-8b-tokenizer"),
    "llm-lora-ddp-gpus": ("alpaca-cleaned", "llama3.1-8b-tokenizer"),
    "llm-lora-ddp-nodes": ("alpaca-cleaned", "llama3.1-8b-tokenizer"),
    "llm-lora-mp-gpus": ("alpaca", "llama3.1-70b-tokenizer"),
    "llm-full-mp-gpus": ("alpaca", "llama3.1-70b-tokenizer"),
    "llm-full-mp-nodes": ("alpaca", "llama3.1-70b-tokenizer"),
}


def test_entries_carry_upstreams_recipe_settings():
    """The standard suite's LLM entries, resolved as `milabench run` resolves them on a
    node of 8 GPUs, parse to upstream's settings: LoRA ranks (8B 8, 70B 16), batch and
    accumulation, learning rates, FSDP2 for every multi-GPU entry (upstream's
    distributed recipes have no DDP), the 70B full fine-tuning's embeddings and head
    sharded apart with unfused AdamW, no CPU offload (upstream v1.3.0 on), bf16
    weights and activation checkpointing; upstream's data set and tokenizer (those the
    catalogue lists for the entry), untruncated, the prompt trained on."""
    from benchshared.catalogue import inputs_for

    from .test_memory_estimates import jobs

    llm = load_llm_main()
    found = jobs()
    for name, (size, rank, batch, accum, lr, fsdp, apart, adamw) in UPSTREAM_RECIPES.items():
        args = llm.parse_args(found[name][1]["argv"])
        assert (args.size, args.lora, args.batch_size, args.grad_accum) == (
            size, rank, batch, accum,
        ), name  # fmt: skip
        assert args.lr == pytest.approx(lr), name
        assert (args.fsdp, args.shard_embeddings, args.adamw) == (fsdp, apart, adamw), name
        assert not args.cpu_offload, name
        assert (args.precision, args.param_dtype, args.gradient_checkpointing) == (
            "bf16", "bf16", True,
        ), name  # fmt: skip
        assert args.seq_len == 512, name  # the stand-in's length (no inputs prepared)
        assert (args.dataset, args.tokenizer) == UPSTREAM_INPUTS[name], name
        assert {args.dataset, args.tokenizer} <= set(inputs_for(name)), name
        assert args.max_seq_len is None and args.train_on_input, name


def test_lora_targets_rank_alpha_and_checkpointing_are_upstreams():
    """LoRA on q, v, o and the three MLP projections (torchtune's q_proj, v_proj,
    output_proj, w1, w2, w3), not k nor the LM head; alpha = 2 x rank; adapters in the
    weights' dtype (torchtune builds them in bf16); every layer checkpointed without
    reentrancy, and no hook that makes the frozen embeddings' output ask for a gradient."""
    import torch

    llm = load_llm_main()
    args = llm.parse_args([*TINY, "--lora", "16", "--param-dtype", "bf16",
                           "--gradient-checkpointing"])  # fmt: skip
    model, _ = llm.build(args, torch.device("meta"))
    adapted = {n: m for n, m in model.named_modules() if "default" in getattr(m, "lora_A", {})}
    assert {n.rsplit(".", 1)[-1] for n in adapted} == set(llm.LORA_TARGETS)
    assert set(llm.LORA_TARGETS) == {"q_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                     "down_proj"}  # fmt: skip
    layers = llm.decoder_layers(model)
    assert len(adapted) == 6 * len(layers)
    for m in adapted.values():
        assert (m.r["default"], m.lora_alpha["default"], m.scaling["default"]) == (16, 32, 2.0)
    base = llm.base_model(model)
    assert "default" not in getattr(base.lm_head, "lora_A", {})
    trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n and p.dtype == torch.bfloat16 for n, p in trained.items())
    for layer in layers:
        assert layer.gradient_checkpointing
        assert layer._gradient_checkpointing_func.keywords == {"use_reentrant": False}
    assert not getattr(base, "_require_grads_hooks", None)


def test_fsdp_units_and_root_are_torchtunes(tmp_path):
    """`shard` as torchtune's ``shard_model``: every decoder layer a unit re-sharded
    after its forward; with ``--shard-embeddings`` (``custom_sharded_layers:
    ['tok_embeddings', 'output']``) the embeddings and the LM head too; the root keeps
    what is left gathered from forward to backward (``reshard_after_forward=False``).
    One gloo rank in this process."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    llm = load_llm_main()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)  # fmt: skip
    try:
        for extra, apart in ((["--lora", "8"], False), (["--shard-embeddings"], True)):
            args = llm.parse_args([*TINY, "--fsdp", *extra])
            model, _ = llm.build(args, torch.device("meta"))
            model = llm.shard(model, args, torch.device("cpu"))
            base = llm.base_model(model)
            for layer in llm.decoder_layers(model):
                assert isinstance(layer, FSDPModule)
                group = layer._get_fsdp_state()._fsdp_param_group
                assert group.post_forward_mesh_info is not None  # re-sharded after forward
            for module in (base.get_input_embeddings(), base.get_output_embeddings()):
                assert isinstance(module, FSDPModule) == apart, extra
            root = model._get_fsdp_state()._fsdp_param_group
            assert root is not None and root.post_forward_mesh_info is None, extra
            kept = sum(p.sharded_param.numel() for p in root.fsdp_params)  # global sizes
            vocab_hidden = llm.SIZES["tiny"][5] * llm.SIZES["tiny"][0]
            assert (kept > vocab_hidden) == (not apart), (extra, kept)
    finally:
        dist.destroy_process_group()
