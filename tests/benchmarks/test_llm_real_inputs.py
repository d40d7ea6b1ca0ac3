"""The LLM fine-tuning entries on upstream's inputs, with tiny stand-ins in the real
formats: a ``tokenizer.json`` built here with the `tokenizers` library (byte-level BPE on
Llama-3's split pattern, Llama-3's special tokens) and an ``alpaca_data_cleaned.json`` of
a few dozen records, placed as input folders with their manifests.

Checked: samples as torchtune's alpaca builders and Llama-3 tokenizer make them (the
template, the header and end tokens, special-token text encoded as text, labels shifted
and masked), torch's distributed sampler's order, batches padded to each batch's
longest, truncation; main.py training on them (the ``inputs`` record says comparable,
the padded lengths are the batches'), the stand-in without them (not comparable), and
prepare.py's pre-tokenised set (written once, then read by main.py)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
import re
import sys
from pathlib import Path

import pytest

from .conftest import BENCHMARKS, bench_env, run_smuggled

pytest.importorskip("peft")
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


@pytest.fixture
def upstream_inputs(tmp_path) -> tuple[Path, list[dict[str, str]]]:
    """``$MILABENCH_DIR_DATA`` holding alpaca-cleaned and the 8B tokenizer (tiny)."""
    data = tmp_path / "data"
    records = alpaca_records()
    raw = json.dumps(records, indent=2).encode()
    write_input(data, "alpaca-cleaned", {"alpaca_data_cleaned.json": raw}, "main")
    build_tokenizer(tmp_path / "tokenizer.json")
    tokenizer = (tmp_path / "tokenizer.json").read_bytes()
    write_input(data, "llama3.1-8b-tokenizer", {"tokenizer.json": tokenizer,
                "original/tokenizer.model": b"not read\n"}, "d04e592b" * 5)  # fmt: skip
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
    them itself): the ``inputs`` record says comparable and names the revisions; the
    batches are the sampler's, padded to each one's longest (the printed mean and max
    are those of rank 0's epoch); tokens/s measured, the loss per optimiser step."""
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
    assert record["real"] == {"alpaca-cleaned": "main", "llama3.1-8b-tokenizer": "d04e592b" * 5}
    assert record["missing"] == [] and "stand_in" not in record
    assert "not comparable" not in run.stdout
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
def test_main_without_the_inputs_runs_the_stand_in(tmp_path, python):
    """Without the input folders: the random-token stand-in, and an ``inputs`` record
    that says not comparable, names what is missing and what ran instead."""
    run = run_smuggled(
        [python, "main.py", *TINY, *UPSTREAM],
        bench_env(stop=2, skip=1, MILABENCH_DIR_DATA=str(tmp_path / "empty")),
        LLM,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    record = inputs_record(run)
    assert record["entry"] == "llm" and record["comparable"] is False
    assert record["missing"] == ["alpaca-cleaned", "llama3.1-8b-tokenizer"]
    assert record["stand_in"] == "32-token random sequences"
    assert "batch 2x32" in run.stdout and "not comparable with upstream" in run.stdout
    assert len(run.rates()) == 2


@pytest.mark.slow
def test_prepare_tokenises_once_and_main_reads_it(upstream_inputs, python):
    """prepare.py with the inputs in place: fetch finds them, the samples are tokenised
    into the pre-tokenised set once (done-marker last); a second prepare keeps it; main.py
    then reads it instead of tokenising, and trains on the same batches."""
    import subprocess

    from benchshared import inputs

    if not hasattr(inputs, "fetch"):
        pytest.skip("benchshared.inputs.fetch is not there yet")
    alpaca = load("alpaca")
    data, _records = upstream_inputs
    env = bench_env(MILABENCH_DIR_DATA=str(data), HF_HUB_OFFLINE="1",
                    MILABENCH_CONFIG=json.dumps({"name": "llm-lora-single"}))  # fmt: skip
    argv = [python, "prepare.py", *TINY, *UPSTREAM]
    first = subprocess.run(argv, env=env, cwd=LLM, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-3000:]
    folder = alpaca.tokenised_folder(data, "alpaca-cleaned", "llama3.1-8b-tokenizer")
    assert "llm-lora-single: tokenised 40 samples" in first.stdout
    assert (folder / "done").is_file()
    again = subprocess.run(argv, env=env, cwd=LLM, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already prepared: 40 samples" in again.stdout
    on_disk = alpaca.Tokenised.load(folder)
    fresh = alpaca.tokenise_inputs(data / "inputs" / "alpaca-cleaned",
                                   data / "inputs" / "llama3.1-8b-tokenizer")  # fmt: skip
    assert on_disk.tokens.tolist() == fresh.tokens.tolist()
    assert on_disk.offsets.tolist() == fresh.offsets.tolist()
    run = run_smuggled(
        [python, "main.py", *TINY, *UPSTREAM],
        bench_env(stop=2, skip=1, MILABENCH_DIR_DATA=str(data)),
        LLM,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "not prepared" not in run.stdout and inputs_record(run)["comparable"] is True


@pytest.mark.slow
def test_two_sharded_ranks_train_on_upstreams_inputs(upstream_inputs):
    """Two gloo ranks under FSDP2 on upstream's inputs: each reads its own half of the
    sampler's order (rank 0 prints its epoch's padded lengths), the step's labelled
    tokens and loss are all-reduced before the gradients are scaled; only rank 0
    writes the ``inputs`` record and the rates, which sum both ranks' tokens."""
    from .test_llm_finetune import torchrun

    alpaca = load("alpaca")
    data, _records = upstream_inputs
    run = run_smuggled(
        [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *TINY, *UPSTREAM,
         "--backend", "gloo", "--fsdp", "--grad-accum", "2"],
        bench_env(stop=2, skip=1, MILABENCH_DIR_DATA=str(data)),
        LLM,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert inputs_record(run)["comparable"] is True
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
    input, nothing else, no pre-tokenised set, exit 0 (main.py then runs the stand-in)."""
    import subprocess

    from benchshared import inputs

    if not hasattr(inputs, "fetch"):
        pytest.skip("benchshared.inputs.fetch is not there yet")
    data = tmp_path / "data"
    env = bench_env(MILABENCH_DIR_DATA=str(data), HF_HUB_OFFLINE="1",
                    MILABENCH_CONFIG=json.dumps({"name": "llm-lora-mp-gpus"}))  # fmt: skip
    done = subprocess.run(
        [python, "prepare.py", *TINY, "--dataset", "alpaca", "--tokenizer",
         "llama3.1-70b-tokenizer"],
        env=env, cwd=LLM, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert not done.stdout.strip(), done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr
    for line, name in zip(lines, ("alpaca", "llama3.1-70b-tokenizer"), strict=True):
        assert f"input {name} for llm-lora-mp-gpus" in line
    assert not (data / "llm").exists()
