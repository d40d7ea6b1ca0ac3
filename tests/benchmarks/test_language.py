"""The standard suite's language entries at tiny sizes on CPU, read from the session's
smoke run (its `t5`, `reformer`, `whisper`, `llama` and `bert-tf32-fp16` entries): T5,
Reformer and Whisper training steps (benchmarks/huggingface), Llama top-k sampling
(benchmarks/llama) and bert's fourth precision (tf32-fp16); each reports its rate, finite
losses where it trains, its FLOPs declaration and the stop event. At full size, the
models, batches and optimisers are upstream milabench's (docs/parity.md): checked on the
objects the scripts build, without running a step."""

from __future__ import annotations

import importlib.util
import inspect
import math
from types import ModuleType

import pytest
from needs import needs

from .conftest import BENCHMARKS, ROOT, bench_env, run_with_pipe
from .smokerun import SmokeRun

needs("transformers")
torch = pytest.importorskip("torch")


def load_main(name: str) -> ModuleType:
    """``benchmarks/<name>/main.py`` as a module (its functions, not its run)."""
    spec = importlib.util.spec_from_file_location(f"{name}_main", BENCHMARKS / name / "main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_batch(module: ModuleType, argv: list[str], *extra: object) -> dict:
    """The first batch the script's loader serves (upstream's: ``batch-size`` samples made
    once on the host, stacked by a DataLoader)."""
    from benchkit.synthetic import repeated_loader

    args = module.parse_args(argv)
    data = module.samples(args, *extra)
    assert len(data) == args.batch_size
    batches = iter(repeated_loader(data, args.batch_size, num_workers=0))
    batch = next(batches)
    for key, value in next(batches).items():  # every batch holds the same samples
        assert torch.equal(value, batch[key]), key
    return batch


def flops_record(smoke: SmokeRun, entry: str) -> dict:
    """``entry``'s one FLOPs declaration in the smoke run."""
    found = smoke.declared_flops(entry)
    assert len(found) == 1, (entry, found)
    assert found[0]["flops_per_item"] > 0 and math.isfinite(found[0]["flops_per_item"])
    return found[0]


@pytest.mark.parametrize("model", ["T5", "Reformer", "Whisper"])
def test_huggingface_models_train(model, smoke: SmokeRun):
    """Reads the session's smoke run (entry ``t5`` / ``reformer`` / ``whisper``: tiny,
    fp32, one loader worker)."""
    entry = model.lower()
    assert smoke.command(entry)[1].endswith("benchmarks/huggingface/main.py")
    assert smoke.option(entry, "--model") == model
    smoke.check_measured(entry, "items/s")
    # Reformer too (custom autograd)
    assert flops_record(smoke, entry)["flops_source"] == "counted"
    assert f"huggingface: {model} tiny" in smoke.stdout_of(entry)


def test_reformer_refuses_a_length_other_than_its_axial_shape(python):
    run = run_with_pipe(
        [python, "main.py", "--model", "Reformer", "--size", "tiny", "--seq-len", "100",
         "--device", "cpu"],
        bench_env(),
        BENCHMARKS / "huggingface",
    )  # fmt: skip
    assert run.returncode != 0 and "trains on its axial length (128)" in run.stderr


def test_t5_is_t5_small_on_1024_plus_1024_tokens():
    hf = load_main("huggingface")
    model, shape = hf.t5(tiny=False)
    c = model.config
    assert type(model).__name__ == "T5ForConditionalGeneration"
    assert (c.d_model, c.d_kv, c.d_ff, c.num_heads, c.vocab_size) == (512, 64, 2048, 8, 32128)
    assert (c.num_layers, c.num_decoder_layers, c.feed_forward_proj) == (6, 6, "relu")
    assert sum(p.numel() for p in model.parameters()) == 60_506_624  # t5-small's count
    batch = first_batch(hf, ["--model", "T5", "--batch-size", "2"], shape)
    assert set(batch) == {"input_ids", "labels"}
    assert batch["input_ids"].shape == batch["labels"].shape == (2, 1024)


def test_reformer_is_a_masked_lm_with_random_labels_at_4096_positions():
    hf = load_main("huggingface")
    model, shape = hf.reformer(tiny=False)
    c = model.config
    assert type(model).__name__ == "ReformerForMaskedLM" and not c.is_decoder
    assert c.num_buckets == 128 and tuple(c.axial_pos_shape) == (64, 64)
    assert (c.hidden_size, len(c.attn_layers), c.vocab_size) == (256, 6, 320)
    batch = first_batch(hf, ["--model", "Reformer", "--batch-size", "2"], shape)
    assert set(batch) == {"input_ids", "labels"}
    assert batch["input_ids"].shape == batch["labels"].shape == (2, 4096)
    assert (batch["labels"] >= 0).all()  # every position scored
    assert not torch.equal(batch["labels"], batch["input_ids"])  # independent ids


def test_whisper_is_whisper_tiny_audio_classification_with_two_labels():
    hf = load_main("huggingface")
    model, shape = hf.whisper(tiny=False)
    c = model.config
    assert type(model).__name__ == "WhisperForAudioClassification"
    assert (c.d_model, c.encoder_layers, c.encoder_attention_heads) == (384, 4, 6)
    assert (c.encoder_ffn_dim, c.num_mel_bins, c.max_source_positions) == (1536, 80, 1500)
    assert not hasattr(model, "decoder") and not hasattr(model, "model")  # encoder only
    assert (model.projector.in_features, model.projector.out_features) == (384, 256)
    assert (model.classifier.in_features, model.classifier.out_features) == (256, 2)
    batch = first_batch(hf, ["--model", "Whisper", "--batch-size", "3"], shape)
    assert set(batch) == {"input_features", "labels"}
    assert batch["input_features"].shape == (3, 80, 3000)
    assert batch["labels"].shape == (3,) and set(batch["labels"].tolist()) <= {0, 1}


@pytest.mark.parametrize("name", ["huggingface", "bert"])
def test_upstream_optimiser_adam_and_gradients_kept(name):
    module = load_main(name)
    argv = ["--model", "T5"] if name == "huggingface" else []
    assert module.parse_args(argv).lr == 1e-3
    layer = torch.nn.Linear(3, 1, bias=False)
    opt = module.make_optimizer(layer, 1e-3)
    assert type(opt) is torch.optim.Adam and opt.defaults["weight_decay"] == 0
    # upstream never clears the gradients: each backward adds into the previous one
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    x = torch.ones(2, 3)
    module.train_step(layer(x).sum(), opt, scaler)
    module.train_step(layer(x).sum(), opt, scaler)
    assert torch.equal(layer.weight.grad, torch.full((1, 3), 4.0))


def test_bert_labels_every_position_and_passes_no_attention_mask():
    bert = load_main("bert")
    assert bert.SIZES["base"] == (768, 12, 12, 3072, 30522)
    argv = ["--size", "base", "--batch-size", "2", "--seq-len", "512"]
    batch = first_batch(bert, argv, 30522)
    assert set(batch) == {"input_ids", "labels"}  # no attention mask
    inputs, labels = batch["input_ids"], batch["labels"]
    assert inputs.shape == labels.shape == (2, 512)
    assert (labels >= 0).all() and (labels < 30522).all()  # every position scored
    assert not torch.equal(inputs, labels)
    assert "attention_mask" not in inspect.getsource(bert.main)


def test_llama_defaults_are_upstream_generation_settings():
    args = load_main("llama").parse_args([])
    assert (args.dtype, args.top_k, args.prompt_len, args.new_tokens) == ("bf16", 10, 256, 256)


def test_standard_entries_pass_upstream_settings(tmp_path, monkeypatch):
    from milabench.config import load_suite

    for key in ("MILABENCH_CONFIG", "MILABENCH_SYSTEM", "MILABENCH_GPU_ARCH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MILABENCH_FAKE_GPUS", "cuda:8:81920")
    entries = load_suite(ROOT / "config" / "standard.yaml", base=tmp_path).all_entries
    batches = {"bert-fp32": 32, "bert-fp16": 32, "bert-tf32": 32, "bert-tf32-fp16": 32}
    batches.update({"t5": 16, "reformer": 32, "whisper": 64})
    for name, batch in batches.items():
        entry = entries[name]
        argv = dict(entry.argv)
        assert entry.parity == "same", name
        assert argv["--batch-size"] == batch, name
        assert argv["--num-workers"] == "auto({n_worker}, 8)", name  # upstream's workers
        if name.startswith("bert"):
            assert (argv["--size"], argv["--seq-len"]) == ("base", 512)
            assert argv["--precision"] == name.removeprefix("bert-")
        else:  # the model's own lengths (t5: 1024 + 1024, reformer: 4096)
            assert "--seq-len" not in argv and "--target-len" not in argv, name
            assert argv["--precision"] == "tf32-fp16"
    llama = entries["llama"]
    argv = dict(llama.argv)
    assert (argv["--dtype"], argv["--top-k"], argv["--batch-size"]) == ("bf16", 10, 1)
    assert (argv["--prompt-len"], argv["--new-tokens"]) == (256, 256)
    # upstream's work with its inputs prepared; the stand-in says so at run time
    assert llama.parity == "same"


def test_llama_inference_tokens_per_second(smoke: SmokeRun):
    """Reads the session's smoke run (entry ``llama``: tiny, fp32, its prompt and new
    token counts read from the command; the stand-in, no input being prepared)."""
    entry = "llama"
    assert smoke.command(entry)[1].endswith("benchmarks/llama/main.py")
    assert (smoke.option(entry, "--size"), smoke.option(entry, "--dtype")) == (
        "tiny",
        "fp32",
    )
    prompt = int(smoke.option(entry, "--prompt-len"))
    new = int(smoke.option(entry, "--new-tokens"))
    smoke.check_measured(entry, "Tok/s", loss=False)
    assert "top-k 10 sampling" in smoke.stdout_of(entry)
    # no input prepared in the smoke base: the stand-in ran, and its record says so
    (inputs,) = [r["inputs"] for r in smoke.data(entry, task="inputs")]
    assert (inputs["comparable"], inputs["real"]) == (False, {})
    assert inputs["missing"] == ["llama2-7b-chat", "llama2-tokenizer", "wikitext-103"]
    assert inputs["stand_in"] == f"random weights, {new} generated tokens per prompt"
    decl = flops_record(smoke, entry)
    assert decl["flops_source"] == "analytic" and decl["precision"] == "fp32"
    # 2 x parameters per generated token, the prompt's forward spread over them
    model, _ = load_main("llama").make_model("tiny", torch.float32, torch.device("cpu"))
    params = sum(p.numel() for p in model.parameters())
    assert decl["flops_per_item"] == pytest.approx(2 * params * (prompt + new) / new)


@pytest.mark.slow
def test_llama_analytic_flops_agree_with_the_counter():
    """At the entry's shapes (7B, 256 + 256 tokens, bf16 weights) the declared work, 2 x
    parameters per token with the prompt spread over the generated tokens, is within 5%
    of one forward over the whole sequence counted on the meta device (what the prompt's
    forward and the decoding steps add up to, the attention over the cache included)."""
    from benchkit.flops import count_flops_on_meta
    from benchkit.memory import Workload

    llama = load_main("llama")
    args = llama.parse_args([])
    tokens = args.prompt_len + args.new_tokens
    built = {}

    def make() -> Workload:
        model, _ = llama.make_model(args.size, llama.DTYPES[args.dtype], "meta")
        built["params"] = sum(p.numel() for p in model.parameters())
        ids = torch.zeros(args.batch_size, tokens, dtype=torch.long)

        @torch.no_grad()
        def step() -> None:
            model(input_ids=ids)

        return Workload([], step, frozen=[model])

    counted = count_flops_on_meta(make)
    per_token = 2.0 * built["params"] * tokens / args.new_tokens  # what main.py declares
    analytic = per_token * args.batch_size * args.new_tokens
    assert abs(analytic - counted) / counted < 0.05, (analytic, counted)


def test_bert_tf32_fp16_counts_its_flops(smoke: SmokeRun):
    """Reads the session's smoke run (entry ``bert-tf32-fp16``: tiny, ``--precision
    tf32-fp16``)."""
    entry = "bert-tf32-fp16"
    assert smoke.command(entry)[1].endswith("benchmarks/bert/main.py")
    assert smoke.option(entry, "--precision") == "tf32-fp16"
    smoke.check_measured(entry, "items/s")
    assert flops_record(smoke, entry)["precision"] == "fp16"  # the matmuls run in fp16
