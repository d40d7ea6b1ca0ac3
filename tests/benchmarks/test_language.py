"""The standard suite's language entries run for real at tiny sizes on CPU: T5, Reformer
and Whisper training steps (benchmarks/huggingface), Llama greedy decoding
(benchmarks/llama) and bert's fourth precision (tf32-fp16); each reports its rate, finite
losses where it trains, its FLOPs declaration and the stop event."""

from __future__ import annotations

import math

import pytest

from .conftest import BENCHMARKS, bench_env, run_with_pipe
from .test_mains import check_budget

pytest.importorskip("transformers")


def flops_record(run) -> dict:
    found = [r for r in run.records if "flops_per_item" in r]
    assert len(found) == 1, run.records[:5]
    assert found[0]["flops_per_item"] > 0 and math.isfinite(found[0]["flops_per_item"])
    return found[0]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["T5", "Reformer", "Whisper"])
def test_huggingface_models_train(model, python):
    run = run_with_pipe(
        [python, "main.py", "--model", model, "--size", "tiny", "--batch-size", "4",
         "--precision", "fp32", "--device", "cpu"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "huggingface",
    )  # fmt: skip
    check_budget(run, 3, "items/s")
    assert flops_record(run)["flops_source"] == "counted"  # Reformer too (custom autograd)
    assert f"huggingface: {model} tiny" in run.stdout


def test_reformer_refuses_a_length_other_than_its_axial_shape(python):
    run = run_with_pipe(
        [python, "main.py", "--model", "Reformer", "--size", "tiny", "--seq-len", "100",
         "--device", "cpu"],
        bench_env(),
        BENCHMARKS / "huggingface",
    )  # fmt: skip
    assert run.returncode != 0 and "trains on its axial length (128)" in run.stderr


@pytest.mark.slow
def test_llama_inference_tokens_per_second(python):
    run = run_with_pipe(
        [python, "main.py", "--size", "tiny", "--dtype", "fp32", "--prompt-len", "8",
         "--new-tokens", "16", "--device", "cpu"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "llama",
    )  # fmt: skip
    check_budget(run, 3, "Tok/s", loss=False)
    decl = flops_record(run)
    assert decl["flops_source"] == "analytic" and decl["precision"] == "fp32"
    # 2 x parameters per generated token, the prompt's forward spread over them
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("llama_main", BENCHMARKS / "llama" / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, _ = module.make_model("tiny", torch.float32, torch.device("cpu"))
    params = sum(p.numel() for p in model.parameters())
    assert decl["flops_per_item"] == pytest.approx(2 * params * (8 + 16) / 16)


@pytest.mark.slow
def test_bert_tf32_fp16_counts_its_flops(python):
    run = run_with_pipe(
        [python, "main.py", "--size", "tiny", "--batch-size", "4", "--seq-len", "32",
         "--precision", "tf32-fp16", "--device", "cpu"],
        bench_env(stop=3, skip=1),
        BENCHMARKS / "bert",
    )  # fmt: skip
    check_budget(run, 3, "items/s")
    assert flops_record(run)["precision"] == "fp16"  # the matmuls run in fp16
