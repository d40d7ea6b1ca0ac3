"""benchmarks/llama with and without upstream's inputs, on CPU at tiny sizes.

The three inputs are built here in their real formats and laid out as prepared inputs
(files at their repository paths, manifest last): a `LlamaConfig` model saved by
``save_pretrained`` in safetensors shards with their index, ``config.json`` and a
``generation_config.json`` with a chat model's sampling defaults; a Llama-style BPE
``tokenizer.json`` trained with `tokenizers`; wikitext-103's train split as two parquet
shards of raw lines (blank lines, `` = Title = `` headings, paragraphs). The model's
embeddings carry a large constant on one dimension and its LM head reads that dimension
only for the end of sequence (or against it): every generation stops at once (or never).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from needs import needs

from .conftest import BENCHMARKS, bench_env, run_with_pipe

torch = pytest.importorskip("torch")
needs("transformers")
needs("pyarrow", reason="the llama entry reads wikitext-103's parquet shards")

LLAMA = BENCHMARKS / "llama"
EOS = 2
WORDS = (
    "valkyria chronicles tactical role playing game developed sega media vision "
    "playstation portable released january japan third series gallian army nameless "
    "penal military unit serving nation during second europan war"
).split()


def load(name: str) -> ModuleType:
    """``benchmarks/llama/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"llama_{name}", LLAMA / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def llama_path(monkeypatch) -> None:
    """main.py's sibling modules importable, as they are when it runs as a script."""
    monkeypatch.syspath_prepend(str(LLAMA))


def wikitext_lines() -> list[str]:
    """Raw lines as wikitext-103 stores them (leading space, trailing newline)."""
    lines = ["", " = Valkyria Chronicles III = \n", ""]
    for i in range(10):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(6 + 3 * i)]
        lines.append(" " + " ".join(words) + " .\n")
        if i % 3 == 0:
            lines += ["", f" = = Section {i} = = \n", " short \n"]
    return lines


def expected_prompts(lines: list[str]) -> list[str]:
    """Upstream's loop, written out: strip, then skip empty, ``" = "`` and short lines."""
    kept = []
    for line in lines:
        text = line.strip()
        if text == "" or text.startswith(" = ") or len(text) < 10:
            continue
        kept.append(text)
    return kept


def write_manifest(folder: Path, name: str, source: str) -> None:
    """The input folder's manifest, written last (what `benchshared.inputs.locate` reads)."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        rel = path.relative_to(folder).as_posix()
        files[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    manifest = {"name": name, "source": source, "revision": "0" * 40, "files": files}
    (folder / "milabench-input.json").write_text(json.dumps(manifest), encoding="utf-8")


def make_wikitext(root: Path, lines: list[str]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = root / "wikitext-103"
    shards = folder / "wikitext-103-v1"
    shards.mkdir(parents=True)
    half = len(lines) // 2
    for index, part in enumerate([lines[:half], lines[half:]]):
        table = pa.table({"text": pa.array(part, pa.string())})
        pq.write_table(table, shards / f"train-0000{index}-of-00002.parquet", row_group_size=4)
    for split in ("validation", "test"):  # read by nobody, present as on the hub
        table = pa.table({"text": pa.array(["", " = Other = \n"], pa.string())})
        pq.write_table(table, shards / f"{split}-00000-of-00001.parquet")
    write_manifest(folder, "wikitext-103", "hf://datasets/Salesforce/wikitext")
    return folder


def make_tokenizer(root: Path, lines: list[str]) -> Path:
    """A Llama-style BPE (Metaspace, byte fallback, ``<unk> <s> </s>`` = 0 1 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(lines, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    folder = root / "llama2-tokenizer"
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    config = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, **specials}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(specials), encoding="utf-8")
    write_manifest(folder, "llama2-tokenizer", "hf://models/hf-internal-testing/llama-tokenizer")
    return folder


def make_weights(root: Path, vocab: int, eos_logit: float) -> Path:
    """A tiny Llama whose end-of-sequence logit is ``eos_logit`` x 8 and every other
    logit about 0, whatever the context (> 0: stops at once; < 0: never stops)."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, intermediate_size=172, max_position_embeddings=512,
        bos_token_id=1, eos_token_id=EOS, pad_token_id=0, tie_word_embeddings=False,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1000.0  # dimension 0 dominates the norm
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[EOS, 0] = eos_logit
    folder = root / "llama2-7b-chat"
    model.save_pretrained(folder, max_shard_size="100KB")
    GenerationConfig(  # sampling defaults, as a chat model's generation_config.json has
        bos_token_id=1, eos_token_id=EOS, pad_token_id=0, do_sample=True,
        temperature=0.6, top_p=0.9, max_length=4096,
    ).save_pretrained(folder)  # fmt: skip
    write_manifest(folder, "llama2-7b-chat", "hf://models/meta-llama/Llama-2-7b-chat-hf")
    return folder


def make_inputs(root: Path, eos_logit: float = 50.0) -> dict[str, Path]:
    lines = wikitext_lines()
    tokenizer = make_tokenizer(root, lines)
    vocab = json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"]
    return {
        "llama2-7b-chat": make_weights(root, len(vocab), eos_logit),
        "llama2-tokenizer": tokenizer,
        "wikitext-103": make_wikitext(root, lines),
    }


def run_main(data: Path, *argv: str) -> object:
    argv_all = [sys.executable, str(LLAMA / "main.py"), "--size", "tiny", "--device", "cpu"]
    argv_all += ["--dtype", "fp32", "--threads", "1", *argv]
    env = bench_env(stop=3, skip=1, MILABENCH_DIR_DATA=str(data))
    return run_with_pipe(argv_all, env, LLAMA)


def inputs_record(run) -> dict:
    (record,) = [r["inputs"] for r in run.records if r.get("task") == "inputs"]
    return record


# -- which inputs -------------------------------------------------------------------------
def test_main_and_prepare_name_the_catalogue_inputs():
    from benchshared.catalogue import CATALOGUE, inputs_for

    main = load("main")
    assert main.INPUTS == inputs_for("llama") == ("llama2-7b-chat", "llama2-tokenizer",
                                                  "wikitext-103")  # fmt: skip
    weights, tokenizer = CATALOGUE["llama2-7b-chat"], CATALOGUE["llama2-tokenizer"]
    assert weights.repo_id == "meta-llama/Llama-2-7b-chat-hf"
    assert "generation_config.json" in weights.files  # its sampling settings apply
    assert tokenizer.repo_id == "hf-internal-testing/llama-tokenizer"


def test_prepare_fetches_at_the_stand_in_size_too(tmp_path, monkeypatch, capsys):
    """``--size`` shapes only the stand-in: a tiny run asks for the same three inputs
    (offline here, as the smoke suite is: one line each, nothing downloaded)."""
    monkeypatch.setenv("MILABENCH_DIR_DATA", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    prepare = load("prepare")
    found = prepare.prepare(prepare.parse_args(["--size", "tiny", "--batch-size", "1"]))
    names = ("llama2-7b-chat", "llama2-tokenizer", "wikitext-103")
    assert found == dict.fromkeys(names)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" unavailable: ")[0] for line in lines] == [
        f"milabench: input {name} for llama" for name in names
    ]
    assert all("offline (HF_HUB_OFFLINE=1)" in line for line in lines)


def test_prepare_at_the_entry_size_asks_for_the_three_inputs(tmp_path, monkeypatch, capsys):
    """Offline: each input not prepared is one line and None (exit 0 all the same); an
    input already prepared is found where it lies, without a fetch."""
    monkeypatch.setenv("MILABENCH_DIR_DATA", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    prepare = load("prepare")
    names = ("llama2-7b-chat", "llama2-tokenizer", "wikitext-103")
    assert prepare.prepare(prepare.parse_args(["--size", "7b"])) == dict.fromkeys(names)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" unavailable: ")[0] for line in lines] == [
        f"milabench: input {name} for llama" for name in names
    ]
    folder = make_wikitext(tmp_path / "inputs", wikitext_lines())
    found = prepare.prepare(prepare.parse_args([]))
    assert found == {"llama2-7b-chat": None, "llama2-tokenizer": None, "wikitext-103": folder}


# -- the prompts ----------------------------------------------------------------------------
def test_prompts_are_upstreams_filtered_train_lines_in_order(tmp_path, llama_path):
    lines = wikitext_lines()
    folder = make_wikitext(tmp_path, lines)
    wikitext = load("wikitext")
    prompts = list(wikitext.WikitextPrompts(folder))
    assert prompts == expected_prompts(lines)
    assert prompts[0] == "= Valkyria Chronicles III ="  # a heading, kept as upstream does
    assert list(wikitext.WikitextPrompts(folder)) == prompts  # each pass starts again
    with pytest.raises(SystemExit, match="no wikitext-103-v1/train"):
        wikitext.WikitextPrompts(tmp_path)


# -- generation and the count ------------------------------------------------------------
def test_a_model_that_never_ends_returns_the_prompt_and_every_new_token(tmp_path, llama_path):
    """In process: the pipeline's returned text is the prompt followed by the decoded
    continuation, and a step's items are prompt tokens + those characters."""
    inputs = make_inputs(tmp_path, eos_logit=-50.0)
    pretrained = load("pretrained")
    pipe = pretrained.load_pipeline(
        inputs["llama2-7b-chat"], inputs["llama2-tokenizer"], torch.float32, "cpu", 8
    )
    settings = pretrained.generation_settings(pipe, top_k=10, new_tokens=12)
    assert settings["eos_token_id"] == EOS and settings["truncation"] is True
    text = expected_prompts(wikitext_lines())[-1]
    assert len(pipe.tokenizer(text)["input_ids"]) > 8  # long enough to be truncated
    tally = pretrained.Tally()
    prompt = pretrained.Prompt(text)
    (sequence,) = pretrained.generate(pipe, prompt, settings, tally)
    returned = sequence["generated_text"]
    assert returned.startswith(text) and len(returned) > len(text)
    assert pipe.prompt_tokens == 8  # truncated to --prompt-len, <s> included
    assert (tally.prompts, tally.new_tokens, tally.longest) == (1, 12, 12)
    assert float(prompt.items) == 8 + len(returned) == tally.prompt_tokens + tally.characters


def test_real_inputs_run_upstreams_generation_and_count(tmp_path):
    """main.py with the three inputs prepared: upstream's pipeline on the wikitext
    prompts, each generation ended by the end of sequence, the rate in upstream's unit
    and an ``inputs`` record that says the run is comparable."""
    inputs = make_inputs(tmp_path / "inputs")
    run = run_main(tmp_path, "--prompt-len", "8", "--new-tokens", "16")
    assert run.returncode == 0, run.stderr[-3000:]
    record = inputs_record(run)
    assert record["comparable"] is True and record["missing"] == []
    assert record["real"] == dict.fromkeys(inputs, "0" * 40)
    assert "STAND-IN" not in run.stdout and "upstream's inputs:" in run.stdout
    rates = run.rates()
    assert rates and all(r["units"] == "Tok/s" and r["rate"] > 0 for r in rates)
    assert not [r for r in run.records if "flops_per_item" in r]  # items of unequal work
    found = re.search(
        r"llama: (\d+) prompts, (\d+) prompt tokens \+ (\d+) returned characters; "
        r"(\d+) new tokens \(([\d.]+) per prompt, longest (\d+), at most 16\)",
        run.stdout,
    )
    assert found, run.stdout
    prompts, tokens, characters, new, _mean, longest = (int(float(g)) for g in found.groups())
    # the first prompts in order (epochs start again at the first line)
    texts = expected_prompts(wikitext_lines())
    texts = (texts * (prompts // len(texts) + 1))[:prompts]
    from transformers import LlamaTokenizerFast

    tokenizer = LlamaTokenizerFast.from_pretrained(inputs["llama2-tokenizer"])
    assert tokens == sum(min(len(tokenizer(t)["input_ids"]), 8) for t in texts)
    # the end of sequence came first every time: nothing decoded after the prompt
    assert (new, longest) == (prompts, 1)
    assert characters == sum(len(t) for t in texts)


def test_without_every_input_the_stand_in_runs_marked(tmp_path):
    """Two of three inputs prepared (no weights): the random-weight stand-in, exactly
    ``--new-tokens`` per prompt, and a record that marks the run not comparable."""
    make_inputs(tmp_path / "inputs")
    for path in sorted((tmp_path / "inputs" / "llama2-7b-chat").iterdir()):
        path.unlink()
    run = run_main(tmp_path, "--prompt-len", "8", "--new-tokens", "16")
    assert run.returncode == 0, run.stderr[-3000:]
    record = inputs_record(run)
    assert record["comparable"] is False and record["missing"] == ["llama2-7b-chat"]
    assert set(record["real"]) == {"llama2-tokenizer", "wikitext-103"}
    assert record["stand_in"] == "random weights, 16 generated tokens per prompt"
    assert "STAND-IN" in run.stdout and "not comparable" in run.stdout
    rates = run.rates()
    assert rates and all(r["units"] == "Tok/s" for r in rates)
    (flops,) = [r for r in run.records if "flops_per_item" in r]
    assert flops["flops_source"] == "analytic"
