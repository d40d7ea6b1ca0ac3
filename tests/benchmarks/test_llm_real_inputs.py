"""The LLM fine-tuning entries on upstream's inputs, with tiny stand-ins in the real
formats: a ``tokenizer.json`` built here with the `tokenizers` library (byte-level BPE on
Llama-3's split pattern, Llama-3's special tokens), an ``alpaca_data_cleaned.json`` of
a few dozen records and a Llama-3.1-style checkpoint of main.py's tiny shape (bf16
safetensors in two shards and their index, ``config.json`` with Llama-3.1's rotary
scaling), placed as input folders with their manifests.

Checked: samples as torchtune's alpaca builders and Llama-3 tokenizer make them (the
template, the header and end tokens, special-token text encoded as text, labels shifted
and masked), torch's distributed sampler's order, batches padded to each batch's
longest, truncation; main.py training on them (the ``inputs`` record says comparable,
the padded lengths are the batches'), the stand-in without them (not comparable), and
prepare.py's pre-tokenised set (written once, then read by main.py); the weights loaded
exactly as ``from_pretrained`` reads them, whole on one process and each FSDP2 rank's own
rows on two."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import re
import sys
from pathlib import Path

import pytest
from needs import needs

from .conftest import BENCHMARKS, bench_env, run_plain, run_smuggled

needs("peft")
tokenizers = pytest.importorskip("tokenizers")

LLM = BENCHMARKS / "llm"
#: Llama-3's pre-tokenizer pattern (its tokenizer.json's Split, torchtune's CL100K_PATTERN)
PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>",
    "<|python_tag|>",
]  # fmt: skip
WORDS = ("give three tips for staying healthy eat a balanced diet and make sure to include "
         "plenty of fruits vegetables exercise regularly keep your body active strong get "
         "enough sleep maintain consistent schedule what are the primary colors red blue "
         "yellow describe structure an atom").split()  # fmt: skip
TINY = ["--size", "tiny", "--batch-size", "2", "--seq-len", "32", "--device", "cpu",
        "--precision", "fp32", "--lora", "4"]  # fmt: skip
UPSTREAM = ["--dataset", "alpaca-cleaned", "--tokenizer", "llama3.1-8b-tokenizer"]
WEIGHTS_REVISION = "d04e592b" * 5
#: Llama-3.1's config.json values besides the shape (its rotary scaling, norm epsilon)
LLAMA31 = {
    "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                        "rope_theta": 500000.0},
    "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "tie_word_embeddings": False,
}  # fmt: skip
BATCH = re.compile(r"padded to each batch's longest: mean ([\d.]+), max (\d+)")


def load(name: str):
    """benchmarks/llm/<name>.py as a module (its folder on the path, as when run)."""
    sys.path.insert(0, str(LLM))
    try:
        spec = importlib.util.spec_from_file_location(f"llm_{name}", LLM / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(LLM))
    return module


def alpaca_records(n: int = 40, seed: int = 0) -> list[dict[str, str]]:
    """Alpaca-format records of varied lengths, a third with an input, one whose output
    writes a special token as text."""
    rng = random.Random(seed)

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))

    records = [
        {"instruction": text(3, 12), "input": text(2, 20) if i % 3 == 0 else "",
         "output": text(1, 60)}
        for i in range(n)
    ]  # fmt: skip
    records[5]["output"] = "eat fruits <|eot_id|> sleep"
    return records


def build_tokenizer(path: Path) -> None:
    """A small byte-level BPE tokenizer.json in Llama-3's layout: the split pattern,
    byte-level, Llama-3's special tokens, a post-processor that adds begin-of-text."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [" ".join(WORDS), "Below is an instruction that describes a task."] * 20
    tok.train_from_iterator(corpus, trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))


def write_input(data: Path, name: str, files: dict[str, bytes], revision: str) -> Path:
    """An input folder as `benchshared.inputs` leaves it: the files at their repository
    paths, then the manifest."""
    folder = data / "inputs" / name
    listed = {}
    for rel, content in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(content)
        listed[rel] = {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    manifest = {"name": name, "source": f"hf://test/{name}", "revision": revision,
                "files": listed}  # fmt: skip
    (folder / "milabench-input.json").write_text(json.dumps(manifest))
    return folder


def build_checkpoint(folder: Path, size: str = "tiny", seed: int = 0) -> dict[str, bytes]:
    """A Llama-3.1-style checkpoint of main.py's ``size`` shape with random bf16 weights,
    as ``save_pretrained`` writes it, in two safetensors shards with their index;
    returns {repository path: bytes}."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, heads, kv_heads, intermediate, vocab = load("main").SIZES[size]
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                         intermediate_size=intermediate, **LLAMA31)  # fmt: skip
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():  # norms not all ones: a load that skipped them would show
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    half = sum(p.numel() * p.element_size() for p in model.parameters()) // 2
    model.save_pretrained(folder, max_shard_size=half + half // 4)
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
    assert sorted(n for n in files if n.endswith(".safetensors")) == [
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    ] and "model.safetensors.index.json" in files, sorted(files)  # fmt: skip
    return files


def checkpoint_tensors(folder: Path) -> dict:
    """Every tensor of a sharded safetensors checkpoint, read whole (the reference)."""
    from safetensors.torch import load_file

    index = json.loads((folder / "model.safetensors.index.json").read_text())
    tensors = {}
    for file in sorted(set(index["weight_map"].values())):
        tensors.update(load_file(folder / file))
    assert set(tensors) == set(index["weight_map"])
    return tensors


@pytest.fixture
def upstream_inputs(tmp_path) -> tuple[Path, list[dict[str, str]]]:
    """``$MILABENCH_DIR_DATA`` holding alpaca-cleaned, the 8B tokenizer and the 8B
    weights (tiny)."""
    data = tmp_path / "data"
    records = alpaca_records()
    raw = json.dumps(records, indent=2).encode()
    write_input(data, "alpaca-cleaned", {"alpaca_data_cleaned.json": raw}, "main")
    build_tokenizer(tmp_path / "tokenizer.json")
    tokenizer = (tmp_path / "tokenizer.json").read_bytes()
    write_input(data, "llama3.1-8b-tokenizer", {"tokenizer.json": tokenizer,
                "original/tokenizer.model": b"not read\n"}, WEIGHTS_REVISION)  # fmt: skip
    weights = build_checkpoint(tmp_path / "checkpoint")
    write_input(data, "llama3.1-8b", weights, WEIGHTS_REVISION)
    return data, records


def expected_sample(tok, record: dict[str, str]) -> tuple[list[int], int]:
    """torchtune's tokens for an Alpaca record, step by step (the template of
    ``AlpacaToMessages``, ``Llama3Tokenizer.tokenize_messages``), and the prompt's end."""
    ids = {s: tok.token_to_id(s) for s in SPECIALS}

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    if record["input"]:
        prompt = (
            "Below is an instruction that describes a task, paired with an input that "
            "provides further context. Write a response that appropriately completes the "
            f"request.\n\n### Instruction:\n{record['instruction']}\n\n### Input:\n"
            f"{record['input']}\n\n### Response:\n"
        )
    else:
        prompt = (
            "Below is an instruction that describes a task. Write a response that "
            "appropriately completes the request.\n\n### Instruction:\n"
            f"{record['instruction']}\n\n### Response:\n"
        )

    def header(role: str) -> list[int]:
        start, end = ids["<|start_header_id|>"], ids["<|end_header_id|>"]
        return [start, *enc(role), end, *enc("\n\n")]

    user = [*header("user"), *enc(prompt.strip()), ids["<|eot_id|>"]]
    assistant = [*header("assistant"), *enc(record["output"].strip()), ids["<|eot_id|>"]]
    return [ids["<|begin_of_text|>"], *user, *assistant, ids["<|end_of_text|>"]], 1 + len(user)


def test_samples_are_torchtunes(upstream_inputs):
    """Every sample's tokens as torchtune's alpaca builder and Llama-3 tokenizer make
    them; labels are the next token, the end-of-text target and the last position
    masked (train_on_input, upstream's default), the user turn too without it; a
    special token written in a text is encoded as text."""
    from tokenizers import Tokenizer

    alpaca = load("alpaca")
    data, records = upstream_inputs
    folder = data / "inputs"
    samples = alpaca.tokenise_inputs(folder / "alpaca-cleaned", folder / "llama3.1-8b-tokenizer")
    tok = Tokenizer.from_file(str(folder / "llama3.1-8b-tokenizer" / "tokenizer.json"))
    tok.encode_special_tokens = True  # torchtune's tiktoken: allowed_special=set()
    assert len(samples) == len(records)
    eot = tok.token_to_id("<|eot_id|>")
    for i, record in enumerate(records):
        want, prompt_end = expected_sample(tok, record)
        tokens, labels = samples.sample(i)
        assert tokens.tolist() == want, i
        assert labels[:-2].tolist() == want[1:-1] and labels[-2:].tolist() == [-100, -100]
        _, masked = samples.sample(i, train_on_input=False)
        assert masked[: prompt_end - 1].tolist() == [-100] * (prompt_end - 1)
        assert masked[prompt_end - 1 : -2].tolist() == want[prompt_end:-1]
        # the end-of-turn ids: the two turns' only, never from the text
        assert want.count(eot) == 2
    assert samples.pad_id == tok.token_to_id("<|finetune_right_pad_id|>")


def test_batches_follow_the_sampler_and_pad_to_each_batchs_longest(upstream_inputs):
    """Two ranks: each reads torch's ``DistributedSampler`` order (shuffle, seed 0, the
    epoch added), in batches without the incomplete last one, each padded to its own
    longest sample (pad id; labels -100), so the lengths change from batch to batch."""
    from torch.utils.data import DistributedSampler

    alpaca = load("alpaca")
    data, records = upstream_inputs
    folder = data / "inputs"
    samples = alpaca.tokenise_inputs(folder / "alpaca-cleaned", folder / "llama3.1-8b-tokenizer")
    lengths = samples.lengths().tolist()
    for rank in (0, 1):
        batches = alpaca.SFTBatches(samples, 3, rank=rank, world=2)
        for epoch in (0, 1):
            sampler = DistributedSampler(range(len(records)), num_replicas=2, rank=rank, seed=0)
            sampler.set_epoch(epoch)
            order = list(sampler)
            assert batches.batches(epoch).flatten().tolist() == order[: len(order) // 3 * 3]
            widths = []
            for b, (tokens, labels) in enumerate(batches):
                members = order[3 * b : 3 * b + 3]
                longest = max(lengths[i] for i in members)
                assert tokens.shape == labels.shape == (3, longest)
                for row, i in enumerate(members):
                    own, own_labels = samples.sample(i)
                    assert tokens[row, : lengths[i]].tolist() == own.tolist()
                    assert labels[row, : lengths[i]].tolist() == own_labels.tolist()
                    assert set(tokens[row, lengths[i] :].tolist()) <= {samples.pad_id}
                    assert set(labels[row, lengths[i] :].tolist()) <= {-100}
                widths.append(longest)
            assert len(widths) == len(order) // 3 == len(batches)
            assert len(set(widths)) > 1  # padded per batch, not to a fixed length
            assert batches.padded_lengths(epoch).tolist() == widths


def test_truncation_keeps_the_end_of_text(upstream_inputs):
    """``max_seq_len`` as torchtune's ``truncate``: the first tokens, the last one made
    end-of-text, which takes no loss."""
    alpaca = load("alpaca")
    data, _records = upstream_inputs
    folder = data / "inputs"
    samples = alpaca.tokenise_inputs(folder / "alpaca-cleaned", folder / "llama3.1-8b-tokenizer")
    whole, _ = samples.sample(0)
    tokens, labels = samples.sample(0, max_seq_len=10)
    assert len(whole) > 10 and len(tokens) == 10
    assert tokens[:9].tolist() == whole[:9].tolist() and int(tokens[9]) == samples.eos_id
    assert labels[:8].tolist() == whole[1:9].tolist() and labels[8:].tolist() == [-100, -100]
    assert int(alpaca.SFTBatches(samples, 4, max_seq_len=10).padded_lengths().max()) == 10


def inputs_record(run) -> dict:
    found = [r["inputs"] for r in run.records if r.get("task") == "inputs"]
    assert len(found) == 1, run.stdout[-2000:]
    return found[0]


@pytest.mark.slow
def test_main_trains_on_upstreams_inputs(upstream_inputs, python):
    """main.py at a tiny size on upstream's inputs (not pre-tokenised: it tokenises
    them itself) and upstream's weights (the entry's, ``llama3.1-8b``): the ``inputs``
    record says comparable and names the three revisions; the batches are the
    sampler's, padded to each one's longest (the printed mean and max are those of rank
    0's epoch); tokens/s measured, the loss per optimiser step."""
    alpaca = load("alpaca")
    data, _records = upstream_inputs
    run = run_smuggled(
        [python, "main.py", *TINY, *UPSTREAM],
        bench_env(stop=3, skip=1, MILABENCH_DIR_DATA=str(data),
                  MILABENCH_CONFIG=json.dumps({"name": "llm-lora-single"})),
        LLM,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    record = inputs_record(run)
    assert record["entry"] == "llm-lora-single" and record["comparable"] is True
    assert record["real"] == {"alpaca-cleaned": "main", "llama3.1-8b-tokenizer": WEIGHTS_REVISION,
                              "llama3.1-8b": WEIGHTS_REVISION}  # fmt: skip
    assert record["missing"] == [] and "stand_in" not in record
    assert "not comparable" not in run.stdout
    assert re.search(r"llm rank 0: weights of llama3.1-8b loaded from \S+ \(\d+ bytes", run.stdout)
    assert "not prepared: tokenised 40 samples now" in run.stdout
    folder = data / "inputs"
    samples = alpaca.tokenise_inputs(folder / "alpaca-cleaned", folder / "llama3.1-8b-tokenizer")
    widths = alpaca.SFTBatches(samples, 2).padded_lengths().tolist()
    found = BATCH.search(run.stdout)
    assert found, run.stdout[-2000:]
    assert float(found[1]) == pytest.approx(sum(widths) / len(widths), abs=0.05)
    assert int(found[2]) == max(widths)
    assert len(run.rates()) == 3 and all(r["units"] == "Tok/s" for r in run.rates())
    assert run.losses() and all(0 < x < 50 for x in run.losses())


@pytest.mark.slow
def test_prepare_tokenises_once_and_main_reads_it(upstream_inputs, python):
    """prepare.py with the inputs in place (the weights too: fetch finds all three,
    offline, and says nothing): the samples are tokenised into the pre-tokenised set once
    (done-marker last); a second prepare keeps it; main.py then reads it instead of
    tokenising, and trains on the same batches."""

    from benchshared import inputs

    if not hasattr(inputs, "fetch"):
        pytest.skip("benchshared.inputs.fetch is not there yet")
    alpaca = load("alpaca")
    data, _records = upstream_inputs
    env = bench_env(MILABENCH_DIR_DATA=str(data), HF_HUB_OFFLINE="1",
                    MILABENCH_CONFIG=json.dumps({"name": "llm-lora-single"}))  # fmt: skip
    argv = [python, "prepare.py", *TINY, *UPSTREAM]
    first = run_plain(argv, env, LLM, timeout=120)
    assert first.returncode == 0, first.stderr[-3000:]
    folder = alpaca.tokenised_folder(data, "alpaca-cleaned", "llama3.1-8b-tokenizer")
    assert "llm-lora-single: tokenised 40 samples" in first.stdout
    assert "unavailable" not in first.stderr, first.stderr
    assert (folder / "done").is_file()
    again = run_plain(argv, env, LLM, timeout=120)
    assert again.returncode == 0 and "already prepared: 40 samples" in again.stdout
    on_disk = alpaca.Tokenised.load(folder)
    fresh = alpaca.tokenise_inputs(data / "inputs" / "alpaca-cleaned",
                                   data / "inputs" / "llama3.1-8b-tokenizer")  # fmt: skip
    assert on_disk.tokens.tolist() == fresh.tokens.tolist()
    assert on_disk.offsets.tolist() == fresh.offsets.tolist()
    run = run_smuggled(
        [python, "main.py", *TINY, *UPSTREAM],
        bench_env(stop=2, skip=1, MILABENCH_DIR_DATA=str(data),
                  MILABENCH_CONFIG=json.dumps({"name": "llm-lora-single"})),
        LLM,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "not prepared" not in run.stdout and inputs_record(run)["comparable"] is True
    assert "llama3.1-8b" in inputs_record(run)["real"]


@pytest.mark.slow
def test_two_sharded_ranks_train_on_upstreams_inputs(upstream_inputs):
    """Two gloo ranks under FSDP2 on upstream's inputs: each reads its own half of the
    sampler's order (rank 0 prints its epoch's padded lengths), the step's labelled
    tokens and loss are all-reduced before the gradients are scaled; only rank 0
    writes the ``inputs`` record and the rates, which sum both ranks' tokens. The
    weights (``--weights``, as by hand): each rank reads about half of the checkpoint,
    and the most it holds while starting stays about its half of the model."""
    from .test_llm_finetune import MATERIALISED, torchrun

    alpaca = load("alpaca")
    data, _records = upstream_inputs
    run = run_smuggled(
        [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *TINY, *UPSTREAM,
         "--weights", "llama3.1-8b", "--backend", "gloo", "--fsdp", "--grad-accum", "2"],
        bench_env(stop=2, skip=1, MILABENCH_DIR_DATA=str(data)),
        LLM,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert inputs_record(run)["comparable"] is True
    assert "llama3.1-8b" in inputs_record(run)["real"]
    on_disk = sum(t.numel() * t.element_size() for t in
                  checkpoint_tensors(data / "inputs" / "llama3.1-8b").values())  # fmt: skip
    read = re.findall(r"llm rank (\d): weights of llama3.1-8b loaded from \S+ \((\d+) bytes",
                      run.stdout)  # fmt: skip
    assert sorted(rank for rank, _ in read) == ["0", "1"], run.stdout[-2000:]
    assert sum(int(n) for _, n in read) == on_disk
    assert all(int(n) <= on_disk * 0.55 for _, n in read), read
    materialised = MATERIALISED.findall(run.stdout)
    assert len(materialised) == 2, run.stdout[-2000:]
    for _rank, _local, whole, peak in materialised:
        # its shards (fp32) and one tensor's rows read at a time (bf16): not the model
        assert int(peak) <= int(whole) * 0.7, (peak, whole)
    assert ", fsdp, " in run.stdout and len(run.events("stop")) == 1
    folder = data / "inputs"
    samples = alpaca.tokenise_inputs(folder / "alpaca-cleaned", folder / "llama3.1-8b-tokenizer")
    widths = alpaca.SFTBatches(samples, 2, rank=0, world=2).padded_lengths().tolist()
    found = BATCH.search(run.stdout)
    assert found and int(found[2]) == max(widths), run.stdout[-2000:]
    assert len(run.rates()) == 2 and run.losses()


def test_alpaca_parquet_reads_as_datasets_does(tmp_path):
    """tatsu-lab/alpaca's form (the 70B entries): a parquet shard under ``data/`` with the
    ``text`` column besides; the records come back in file order, the three fields."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    alpaca = load("alpaca")
    records = alpaca_records(7)
    table = pa.Table.from_pylist([{**r, "text": "unused"} for r in records])
    shard = tmp_path / "shard.parquet"
    pq.write_table(table, shard)
    folder = write_input(
        tmp_path, "alpaca", {"data/train-00000-of-00001.parquet": shard.read_bytes()}, "main"
    )
    assert alpaca.read_alpaca(folder) == records


@pytest.mark.slow
def test_prepare_without_the_inputs_only_says_so(tmp_path, python):
    """prepare.py where the inputs cannot be fetched (offline): fetch's one line per
    input of the entry (weights, tokenizer, data set), nothing else, no pre-tokenised
    set, exit 0 (main.py then runs the stand-in)."""

    from benchshared import inputs

    if not hasattr(inputs, "fetch"):
        pytest.skip("benchshared.inputs.fetch is not there yet")
    data = tmp_path / "data"
    env = bench_env(MILABENCH_DIR_DATA=str(data), HF_HUB_OFFLINE="1",
                    MILABENCH_CONFIG=json.dumps({"name": "llm-lora-mp-gpus"}))  # fmt: skip
    done = run_plain(
        [python, "prepare.py", *TINY, "--dataset", "alpaca", "--tokenizer",
         "llama3.1-70b-tokenizer"],
        env, LLM, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert not done.stdout.strip(), done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 3, done.stderr  # the entry's inputs, weights first
    for line, name in zip(lines, ("llama3.1-70b", "llama3.1-70b-tokenizer", "alpaca"),
                          strict=True):  # fmt: skip
        assert f"input {name} for llm-lora-mp-gpus unavailable: offline" in line
    assert not (data / "llm").exists()


def test_checkpoint_loads_as_from_pretrained(tmp_path):
    """One process (no sharding): main.py's model built with the weights input, in fp32
    and in bf16, with and without LoRA: every base weight is exactly what
    ``from_pretrained`` reads from the same two-shard checkpoint (cast as it casts), the
    rotary frequencies are the checkpoint's scaled ones, and LoRA's adapters, added
    after the load, start at B = 0 (the model computes the checkpoint's function)."""
    import torch
    from transformers import LlamaForCausalLM

    llm = load("main")
    folder = tmp_path / "llama3.1-8b"
    build_checkpoint(folder)
    for dtype, lora in (("fp32", "4"), ("bf16", "0")):
        args = llm.parse_args(["--size", "tiny", "--device", "cpu", "--param-dtype", dtype,
                               "--lora", lora])  # fmt: skip
        args.checkpoint = folder
        model, vocab = llm.build(args, torch.device("cpu"))
        torch_dtype = llm.PARAM_DTYPES[dtype]
        reference = LlamaForCausalLM.from_pretrained(folder, dtype=torch_dtype)
        ours = {llm.hf_name(k): v for k, v in model.state_dict().items() if ".lora_" not in k}
        for name, value in reference.state_dict().items():
            assert ours[name].dtype == torch_dtype, name
            assert torch.equal(ours[name], value), name
        assert set(ours) == set(reference.state_dict())
        stored = checkpoint_tensors(folder).values()
        assert vocab == 2048
        assert args.read_bytes == sum(t.numel() * t.element_size() for t in stored)
        base = llm.base_model(model)
        assert base.config.rope_parameters["rope_type"] == "llama3"
        assert base.config.rms_norm_eps == 1e-5 and not base.config.tie_word_embeddings
        ids = torch.randint(0, vocab, (1, 12))
        with torch.no_grad():
            assert torch.equal(model(input_ids=ids).logits, reference(input_ids=ids).logits)
        lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
        assert bool(lora_b) == (lora != "0") and all(not p.any() for p in lora_b)


def test_a_checkpoint_of_another_shape_is_not_used(tmp_path, capsys, monkeypatch):
    """Weights whose shape is not ``--size``'s are not used: main.py says why and keeps
    random weights (the input then counts as missing); loading names a tensor the
    checkpoint lacks."""
    import torch

    llm = load("main")
    data = tmp_path / "data"
    files = {}
    build_checkpoint(tmp_path / "ckpt")
    for path in (tmp_path / "ckpt").iterdir():
        files[path.name] = path.read_bytes()
    folder = write_input(data, "llama3.1-8b", files, WEIGHTS_REVISION)
    args = llm.parse_args(["--size", "small", "--weights", "llama3.1-8b"])
    monkeypatch.setenv("MILABENCH_DIR_DATA", str(data))
    assert llm.usable_checkpoint(args, "llama3.1-8b", 0) is None
    args.size = "tiny"
    assert llm.usable_checkpoint(args, "llama3.1-8b", 0) == folder
    assert "llama3.1-8b not used (random weights): the checkpoint in" in capsys.readouterr().out
    with torch.device("meta"):
        model, _ = llm.make_model("tiny", 32, layers=3, checkpoint=folder)
    with pytest.raises(ValueError, match="has no tensor model.layers.2.self_attn"):
        llm.load_checkpoint(model.to_empty(device="cpu"), folder)


#: Run by each of two torchrun ranks (argv: the checkpoint folder): main.py's sharded
#: build (meta device, FSDP2, `materialise_shards`) with LoRA and as the full fine-tuning
#: entries shard it; every weight gathered (``full_tensor``) must equal the checkpoint's
#: tensor read whole, the sharded forward ``from_pretrained``'s; the rows each rank read,
#: never a whole model's worth.
SHARDED_CHECK = """
import json, sys
from pathlib import Path
import torch
import torch.distributed as dist
sys.path.insert(0, ".")
import main as llm
from safetensors.torch import load_file

folder = Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
index = json.loads((folder / "model.safetensors.index.json").read_text())
whole = {}
for file in sorted(set(index["weight_map"].values())):
    whole.update(load_file(folder / file))
on_disk = sum(t.numel() * t.element_size() for t in whole.values())
for options in (["--lora", "4"], ["--shard-embeddings", "--param-dtype", "bf16"]):
    args = llm.parse_args(["--size", "tiny", "--device", "cpu", "--fsdp", *options])
    args.checkpoint = folder
    model, _vocab = llm.build(args, torch.device("meta"))
    model = llm.materialise_shards(model, args, torch.device("cpu"))
    checked = 0
    for name, param in model.named_parameters():
        assert type(param.data).__name__ == "DTensor", name
        full = param.full_tensor()
        if ".lora_" in name:
            continue
        expected = whole[llm.hf_name(name)].to(full.dtype)
        assert torch.equal(full, expected), (rank, name)
        checked += 1
    assert checked == len(whole), (checked, len(whole))
    if "--lora" in options:  # the forward computes with the loaded shards: the checkpoint's
        from transformers import LlamaForCausalLM

        reference = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
        ids = torch.arange(12).reshape(1, 12) * 97 % 2048
        with torch.no_grad():
            ours, theirs = model(input_ids=ids).logits, reference(input_ids=ids).logits
        assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-5), (ours - theirs).abs().max()
    read = torch.tensor([args.read_bytes])
    assert 0 < args.read_bytes <= on_disk * 0.55, (rank, args.read_bytes, on_disk)
    dist.all_reduce(read)
    assert int(read) == on_disk, (int(read), on_disk)
    print(f"rank {rank} {options}: {checked} weights equal, read {args.read_bytes} of {on_disk}")
# as the benchmark leaves: its sharded model dropped before its group (a group destroyed
# under live FSDP state can abort a rank at exit under load: SIGABRT, seen once in CI)
from benchkit.torchsetup import teardown_distributed
dist.barrier()  # and the ranks leave together, as ddp's main.py leaves
model = reference = None
teardown_distributed()
"""


@pytest.mark.slow
def test_two_ranks_fill_their_shards_from_the_checkpoint(tmp_path):
    """Two gloo ranks, FSDP2 on the meta device as the sharded entries build: each rank
    fills only its own shards from the two-shard checkpoint (``get_slice`` of its rows:
    the two read the checkpoint's bytes once between them), and the weights gathered
    from both are exactly the checkpoint's, with LoRA (peft's names; the forward then
    gives ``from_pretrained``'s logits) and with the embeddings and the head as units of
    their own (bf16)."""
    import subprocess

    from .test_llm_finetune import torchrun

    folder = tmp_path / "llama3.1-8b"
    build_checkpoint(folder)
    script = tmp_path / "sharded_check.py"
    script.write_text(SHARDED_CHECK)
    done = subprocess.run(
        [torchrun(), "--standalone", "--nproc-per-node=2", str(script), str(folder)],
        env=bench_env(), cwd=LLM, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    said = re.findall(r"rank (\d) \[.*?\]: (\d+) weights equal", done.stdout)
    assert sorted(said) == [("0", "21"), ("0", "21"), ("1", "21"), ("1", "21")], done.stdout


def test_the_stand_in_phrase_says_what_was_random():
    """The ``inputs`` record's ``stand_in``: random weights when only the weights are
    missing, random tokens when only the data set or the tokenizer is, both when both."""
    llm = load("main")
    here = Path("x")
    used = {"alpaca": here, "llama3.1-70b-tokenizer": here, "llama3.1-70b": None}
    assert llm.stand_in(used, "llama3.1-70b", 64) == "random weights"
    used = {"alpaca": None, "llama3.1-70b-tokenizer": here, "llama3.1-70b": here}
    assert llm.stand_in(used, "llama3.1-70b", 64) == "64-token random sequences"
    used["llama3.1-70b"] = None
    assert llm.stand_in(used, "llama3.1-70b", 64) == "random weights, 64-token random sequences"
