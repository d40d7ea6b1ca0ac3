"""LLM fine-tuning paths of benchmarks/llm at tiny sizes on CPU: LoRA (peft) in one
process, LoRA under DDP and under FSDP2, full fine-tuning under FSDP2 (2 torchrun ranks,
gloo), gradient accumulation, and the analytic FLOPs formula against the counted one."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest

from .conftest import BENCHMARKS, bench_env, run_smuggled, run_with_pipe
from .test_mains import check_budget

pytest.importorskip("peft")
TINY = ["--size", "tiny", "--batch-size", "2", "--seq-len", "32", "--device", "cpu"]


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


@pytest.mark.slow
def test_lora_single_trains_only_the_adapters(python):
    run = run_with_pipe(
        [python, "main.py", *TINY, "--lora", "8", "--grad-accum", "2", "--precision", "fp32",
         "--gradient-checkpointing"],
        bench_env(stop=4, skip=1),
        BENCHMARKS / "llm",
    )  # fmt: skip
    check_budget(run, 4, "Tok/s")
    assert "M trained)" in run.stdout and "accumulation 2" in run.stdout
    decl = [r for r in run.records if "flops_per_item" in r]
    assert len(decl) == 1 and decl[0]["flops_source"] == "analytic"


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra, mode",
    [
        (["--lora", "8"], "ddp"),
        (["--lora", "8", "--fsdp"], "fsdp"),
        (["--fsdp", "--cpu-offload", "--param-dtype", "bf16", "--precision", "bf16"], "fsdp"),
    ],
    ids=["lora-ddp", "lora-fsdp", "full-fsdp-bf16"],
)
def test_two_ranks(extra, mode, python):
    run = run_smuggled(
        [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *TINY,
         "--backend", "gloo", "--gradient-checkpointing", *extra],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "llm",
    )  # fmt: skip
    check_budget(run, 3, "Tok/s")
    assert f", {mode}, " in run.stdout
    assert len(run.events("stop")) == 1  # only rank 0 writes
    assert "destroy_process_group" not in run.stderr and "terminate called" not in run.stderr


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
