"""rlhf on upstream's inputs, in their real formats at a tiny size, and without them.

The three inputs are built here as ``prepare.py`` would find them fetched: pythia-160m's
folder (a tiny ``GPTNeoXForCausalLM`` saved with ``save_pretrained``: ``config.json``,
``model.safetensors``), pythia-1b-deduped's tokenizer (a ``tokenizers`` tokenizer whose
end of text is id 0, saved as ``tokenizer.json`` and its configuration) and the
descriptiveness split (a parquet file with the data set's ``prompt`` column beside its
``chosen`` and ``rejected`` conversations), each with its manifest. prepare.py must
tokenise the prompts but the last 100 with upstream's tokenizer (``[PAD]`` added); main.py
must load the four models from the checkpoint, serve shuffled batches left-padded to
their longest and count batch x padded length; without the inputs it runs the stand-in
and says that it is not comparable.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from .conftest import BENCHMARKS, bench_env, run_smuggled, run_with_pipe
from .test_llava_real_inputs import write_manifest
from .test_rlhf import load_main, torchrun

RLHF = BENCHMARKS / "rlhf"
pytestmark = pytest.mark.slow

WORDS = "the old house stood by a quiet river where children played every summer".split()
TRAIN = 8  # prompts to train on; upstream keeps the last 100 rows for evaluation
ARGV = ["--size", "tiny", "--batch-size", "4", "--response-len", "6", "--ppo-epochs", "2"]
ARGV += ["--precision", "fp32", "--device", "cpu"]


def prompt_texts() -> list[str]:
    """Book-like prompts of 3 to 14 words: 8 training rows, then 100 evaluation rows."""
    rng = random.Random(0)
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 14))) for _ in range(TRAIN + 100)]


def build_tokenizer_input(folder: Path) -> None:
    """pythia-1b-deduped's tokenizer files at a tiny size: ``<|endoftext|>`` is id 0 (as
    pythia's), 500 tokens in all, so that ``[PAD]`` gets id 500 when it is added."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<|endoftext|>": 0, "<|padding|>": 1}
    for word in sorted(set(WORDS)):
        vocab[word] = len(vocab)
    while len(vocab) < 500:
        vocab[f"filler{len(vocab)}"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )  # fmt: skip
    fast.save_pretrained(folder)
    write_manifest(
        folder, "pythia-1b-deduped", "hf://models/EleutherAI/pythia-1b-deduped", "7199d8f"
    )


def build_model_input(folder: Path, rlhf: Any) -> None:
    """pythia-160m's folder at the tiny shape (GPT-NeoX, untied head, no score head)."""
    import torch
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(0)
    GPTNeoXForCausalLM(rlhf.neox_config("tiny")).save_pretrained(folder, safe_serialization=True)
    assert (folder / "model.safetensors").is_file() and (folder / "config.json").is_file()
    write_manifest(folder, "pythia-160m", "hf://models/EleutherAI/pythia-160m", "50f5173")


def build_dataset_input(folder: Path) -> None:
    """The descriptiveness split: ``prompt`` (text), ``chosen`` and ``rejected`` (lists of
    {content, role} messages), as trl's "trl-style" data sets hold them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    message = pa.struct([("content", pa.string()), ("role", pa.string())])
    texts = prompt_texts()
    table = pa.table(
        {
            "prompt": texts,
            "chosen": [[{"content": t, "role": "user"}, {"content": "yes", "role": "assistant"}]
                       for t in texts],
            "rejected": [[{"content": t, "role": "user"}, {"content": "no", "role": "assistant"}]
                         for t in texts],
        },
        schema=pa.schema([("prompt", pa.string()), ("chosen", pa.list_(message)),
                          ("rejected", pa.list_(message))]),
    )  # fmt: skip
    (folder / "data").mkdir(parents=True)
    pq.write_table(table, folder / "data" / "descriptiveness-00000-of-00001.parquet")
    write_manifest(
        folder, "descriptiveness-sentiment",
        "hf://datasets/trl-internal-testing/descriptiveness-sentiment-trl-style", "main",
    )  # fmt: skip


@pytest.fixture
def rlhf(monkeypatch) -> Any:
    pytest.importorskip("transformers")
    pytest.importorskip("pyarrow")
    return load_main(RLHF, "rlhf_main_real", monkeypatch)


@pytest.fixture
def prepared_inputs(tmp_path, rlhf, monkeypatch) -> Path:
    """``$MILABENCH_DIR_DATA`` holding the three inputs, as fetched (set here too)."""
    data = tmp_path / "data"
    build_tokenizer_input(data / "inputs" / "pythia-1b-deduped")
    build_model_input(data / "inputs" / "pythia-160m", rlhf)
    build_dataset_input(data / "inputs" / "descriptiveness-sentiment")
    monkeypatch.setenv("MILABENCH_DIR_DATA", str(data))
    return data


def test_rlhf_runs_upstreams_work_on_real_inputs(prepared_inputs, rlhf, python):
    """prepare.py tokenises the training prompts once; main.py trains the checkpoint's
    models on left-padded batches of them and records upstream's inputs."""
    import torch
    from prompts import load_tokenizer  # rlhf's own module (its folder is on sys.path)

    env = bench_env(stop=3, skip=1, MILABENCH_DIR_DATA=str(prepared_inputs))
    prep = run_with_pipe([python, "prepare.py", *ARGV], env, RLHF)
    assert prep.returncode == 0, prep.stderr
    assert f"tokenised {TRAIN} descriptiveness prompts" in prep.stdout
    prepared = json.loads((prepared_inputs / "rlhf-descriptiveness" / "prompts.json").read_text())
    tokenizer = load_tokenizer(prepared_inputs / "inputs" / "pythia-1b-deduped")
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "[PAD]"
    assert (prepared["pad_id"], prepared["eos_id"]) == (500, 0)
    texts = prompt_texts()[:TRAIN]  # the last 100 rows are upstream's evaluation set
    assert prepared["prompts"] == [tokenizer(t)["input_ids"] for t in texts]
    assert [len(p) for p in prepared["prompts"]] == [len(t.split()) for t in texts]
    again = run_with_pipe([python, "prepare.py", *ARGV], env, RLHF)
    assert "already prepared" in again.stdout

    run = run_with_pipe([python, "main.py", *ARGV], env, RLHF)
    assert run.returncode == 0, run.stderr[-3000:]
    (record,) = [r["inputs"] for r in run.records if r.get("task") == "inputs"]
    assert record["comparable"] and record["missing"] == []
    assert record["real"] == {
        "pythia-1b-deduped": "7199d8f", "pythia-160m": "50f5173",
        "descriptiveness-sentiment": "main",
    }  # fmt: skip
    assert "not comparable" not in run.stdout and "pythia-160m weights" in run.stdout
    rates = run.rates()
    assert len(rates) == 3 and all(r["units"] == "Tok/s" and r["rate"] > 0 for r in rates)
    assert run.losses() and all(math.isfinite(x) for x in run.losses())

    # The FLOPs record: per prompt token at the batches' mean padded length
    args = rlhf.parse_args(ARGV)
    mean = rlhf.mean_padded_length(prepared["prompts"], args.batch_size, args.seed)
    args.prompt_len = round(mean)
    config = rlhf.model_config(args)
    (flops,) = [r for r in run.records if "flops_per_item" in r]
    per_token = rlhf.flops_per_sequence(config, args) / args.prompt_len
    assert flops["flops_per_item"] == pytest.approx(per_token)

    # Batches as trl's data loader makes them: left-padded with [PAD] to their longest,
    # every prompt once per pass; the rate counts batch x padded length.
    args.pad_id = prepared["pad_id"]
    batches = rlhf.prompt_batches(prepared["prompts"], args, 0, 1, torch.device("cpu"))
    seen = []
    for _ in range(TRAIN // args.batch_size):
        batch = next(batches)
        assert batch.shape[0] == args.batch_size
        for row in batch.tolist():
            ids = [t for t in row if t != args.pad_id]
            assert row == [args.pad_id] * (len(row) - len(ids)) + ids  # pads on the left
            seen.append(ids)
        assert batch.shape[1] == max(len(ids) for ids in seen[-args.batch_size :])
    assert sorted(seen) == sorted(prepared["prompts"])

    # The four models from the checkpoint: policy = reference = the saved weights, the
    # value and reward heads each freshly initialised.
    checkpoint = prepared_inputs / "inputs" / "pythia-160m"
    models = rlhf.build_models("tiny", torch.device("cpu"), args.pad_id, checkpoint)
    from safetensors.torch import load_file

    saved = load_file(checkpoint / "model.safetensors")
    policy = models.core.policy.state_dict()
    head = models.core.policy.get_output_embeddings().weight  # pythia's "embed_out"
    assert torch.equal(saved.pop("embed_out.weight"), head)
    assert saved and all(torch.equal(saved[k], policy[k]) for k in saved)
    reference = models.reference.state_dict()
    assert all(torch.equal(policy[k], reference[k]) for k in policy)
    assert not torch.equal(models.core.value.score.weight, models.reward.score.weight)
    assert models.core.policy.generation_config.pad_token_id == 500


def test_rlhf_two_ranks_on_real_inputs(prepared_inputs, rlhf, python):
    """rlhf-gpus' path: under torchrun each rank draws its share of the prompts (4 of
    the 8 per pass, 2 batches of 2), rank 0 alone writes the ``inputs`` record."""
    env = bench_env(stop=3, skip=1, MILABENCH_DIR_DATA=str(prepared_inputs))
    argv = [*ARGV[:2], "--batch-size", "2", *ARGV[4:]]
    prep = run_with_pipe([python, "prepare.py", *argv], env, RLHF)
    assert prep.returncode == 0, prep.stderr
    command = [torchrun(), "--standalone", "--nproc-per-node=2", "main.py", *argv]
    run = run_smuggled([*command, "--backend", "gloo"], env, RLHF, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    (record,) = [r["inputs"] for r in run.records if r.get("task") == "inputs"]
    assert record["comparable"] and len(record["real"]) == 3
    assert "world size 2" in run.stdout and len(run.rates()) == 3
    assert "terminate called" not in run.stderr


def test_rlhf_without_inputs_runs_the_stand_in(tmp_path, rlhf, python):
    """No input folder and the hub offline: prepare.py names each missing input in one
    line and writes nothing; main.py runs random prompts and says it is not comparable."""
    data = tmp_path / "data"
    env = bench_env(stop=2, skip=1, MILABENCH_DIR_DATA=str(data), HF_HUB_OFFLINE="1")
    prep = run_with_pipe([python, "prepare.py", *ARGV], env, RLHF, timeout=120)
    assert prep.returncode == 0, prep.stderr
    said = [line for line in prep.stderr.splitlines() if line.strip()]
    assert [line.split()[2] for line in said] == [
        "pythia-1b-deduped", "pythia-160m", "descriptiveness-sentiment",
    ]  # fmt: skip
    assert all(" for rlhf-single unavailable: " in line for line in said), said
    assert prep.stdout == "" and not (data / "rlhf-descriptiveness").exists()

    run = run_with_pipe([python, "main.py", *ARGV, "--prompt-len", "8"], env, RLHF)
    assert run.returncode == 0, run.stderr[-3000:]
    (record,) = [r["inputs"] for r in run.records if r.get("task") == "inputs"]
    assert not record["comparable"] and record["real"] == {}
    assert len(record["missing"]) == 3
    assert record["stand_in"] == "random-weight models of the tiny shape on random 8-token prompts"
    assert "not comparable with upstream milabench" in run.stdout
    assert len(run.rates()) == 2
