"""llava on upstream's inputs, in their real formats at a tiny size, and without them.

The inputs are built here as ``prepare.py`` would find them fetched: a tiny
``LlavaForConditionalGeneration`` saved with ``save_pretrained`` (safetensors) beside its
processor (a ``tokenizers`` tokenizer with ``<image>`` and ``<pad>`` as added tokens, a
CLIP image processor, llava-1.5's processor settings), and a the_cauldron aokvqa parquet
file in the subset's schema (``images``: list of {bytes, path} with the JPEG bytes
embedded; ``texts``: list of {user, assistant, source}), each in its input folder with a
manifest. main.py must then do upstream's work on them (the conversation written as
upstream writes it, the processor in the step expanding ``<image>`` to one token per
patch, the pads out of the loss) and say so in its ``inputs`` record; without them it
runs the stand-in and says that it is not comparable.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from .conftest import BENCHMARKS, bench_env, run_with_pipe
from .test_rlhf import load_main

LLAVA = BENCHMARKS / "llava"
pytestmark = pytest.mark.slow

#: aokvqa-like rows: (image size, image mode, conversation turns); the lengths differ.
ROWS = [
    ((48, 40), "RGB", [("What is the man holding in his hand?", "A red umbrella.")]),
    ((40, 64), "L", [("What colour is the cat?", "Black."), ("Where is it?", "On a sofa.")]),
    ((64, 64), "RGB", [("Why is the road wet?", "Because it has been raining all day long.")]),
    ((36, 50), "RGB", [("How many birds?", "Two.")]),
]


def write_manifest(folder: Path, name: str, source: str, revision: str) -> None:
    """The input folder's manifest (``benchshared.inputs``), written last."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        rel = path.relative_to(folder).as_posix()
        files[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    manifest = {"name": name, "source": source, "revision": revision, "files": files}
    (folder / "milabench-input.json").write_text(json.dumps(manifest))


def words() -> list[str]:
    """Every word and punctuation mark of `ROWS` and upstream's prompt format."""
    import re

    text = " ".join(f"Human: {u} Assistant: {a}" for _, _, turns in ROWS for u, a in turns)
    return sorted(set(re.findall(r"\w+|[^\w\s]", text)))


def build_tokenizer(vocab_size: int, image_token: int, pad_token: int) -> Any:
    """A Llama-like fast tokenizer: ``<s>`` prepended, ``<unk>``/``<s>``/``</s>`` = 0/1/2,
    the words of `ROWS`, fillers up to ``image_token``, then ``<image>`` and ``<pad>``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for word in words():
        vocab[word] = len(vocab)
    while len(vocab) < image_token:
        vocab[f"filler{len(vocab)}"] = len(vocab)
    assert image_token == len(vocab) and pad_token == image_token + 1
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        padding_side="left",
    )  # fmt: skip
    fast.add_special_tokens({"additional_special_tokens": ["<image>"]})
    fast.add_special_tokens({"pad_token": "<pad>"})
    assert fast.convert_tokens_to_ids(["<image>", "<pad>"]) == [image_token, pad_token]
    return fast


def build_model_input(folder: Path, llava: Any) -> None:
    """llava-1.5-7b's input folder at the tiny shape: weights, config, processor."""
    import torch
    from transformers import CLIPImageProcessor, LlavaProcessor

    shape = llava.SIZES["tiny"]
    torch.manual_seed(0)
    model = llava.build_model(shape, torch.device("cpu"), torch.float32)
    model.save_pretrained(folder, safe_serialization=True)
    size = shape.image_size
    images = CLIPImageProcessor(
        size={"shortest_edge": size},
        crop_size={"height": size, "width": size},
        resample=3,
        image_mean=list(llava.CLIP_MEAN),
        image_std=list(llava.CLIP_STD),
    )
    processor = LlavaProcessor(
        image_processor=images,
        tokenizer=build_tokenizer(shape.vocab, shape.image_token, shape.pad_token),
        patch_size=shape.patch_size,
        vision_feature_select_strategy="default",
        image_token="<image>",
        num_additional_image_tokens=1,
    )
    processor.save_pretrained(folder)
    assert list(folder.glob("*.safetensors")) and (folder / "tokenizer.json").is_file()
    write_manifest(folder, "llava-1.5-7b", "hf://models/llava-hf/llava-1.5-7b-hf", "e2214c2")


def jpeg(size: tuple[int, int], mode: str, seed: int) -> bytes:
    from PIL import Image

    rng = __import__("random").Random(seed)
    image = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    image.paste((rng.randrange(256), 0, 0), (0, 0, size[0] // 2, size[1] // 3))
    out = io.BytesIO()
    image.convert(mode).save(out, format="JPEG")
    return out.getvalue()


def build_dataset_input(folder: Path) -> None:
    """the_cauldron's aokvqa input folder: one parquet file of `ROWS` in the real schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    turn = pa.struct([("user", pa.string()), ("assistant", pa.string()), ("source", pa.string())])
    schema = pa.schema([("images", pa.list_(image)), ("texts", pa.list_(turn))])
    table = pa.table(
        {
            "images": [[{"bytes": jpeg(size, mode, i), "path": None}] for i, (size, mode, _) in
                       enumerate(ROWS)],
            "texts": [[{"user": u, "assistant": a, "source": "aokvqa"} for u, a in turns]
                      for _, _, turns in ROWS],
        },
        schema=schema,
    )  # fmt: skip
    (folder / "aokvqa").mkdir(parents=True)
    pq.write_table(table, folder / "aokvqa" / "train-00000-of-00001-0123456789abcdef.parquet")
    write_manifest(
        folder, "the-cauldron-aokvqa", "hf://datasets/HuggingFaceM4/the_cauldron", "main"
    )


@pytest.fixture
def llava(monkeypatch) -> Any:
    pytest.importorskip("transformers")
    pytest.importorskip("pyarrow")
    pytest.importorskip("PIL")
    return load_main(LLAVA, "llava_main_real", monkeypatch)


@pytest.fixture
def prepared_inputs(tmp_path, llava, monkeypatch) -> Path:
    """``$MILABENCH_DIR_DATA`` holding both inputs, as fetched (set in this process too)."""
    data = tmp_path / "data"
    build_model_input(data / "inputs" / "llava-1.5-7b", llava)
    build_dataset_input(data / "inputs" / "the-cauldron-aokvqa")
    monkeypatch.setenv("MILABENCH_DIR_DATA", str(data))
    return data


def upstream_prompt(turns: list[tuple[str, str]]) -> str:
    """Upstream's ``apply_chat_template`` output, written out for the test rows."""
    body = "".join(f"Human: {u}\nAssistant: {a}\n" for u, a in turns)
    return f"<image>\n{body}".strip()


def test_llava_runs_upstreams_work_on_real_inputs(prepared_inputs, llava, python):
    """prepare.py copies the parquet rows once; main.py loads the checkpoint and its
    processor, processes each row as upstream does inside the step, trains, and records
    that the run used upstream's inputs."""
    import pyarrow as pa
    import torch

    env = bench_env(stop=3, skip=1, MILABENCH_DIR_DATA=str(prepared_inputs))
    argv = ["--size", "tiny", "--batch-size", "1", "--precision", "fp32", "--device", "cpu"]
    prep = run_with_pipe([python, "prepare.py", *argv], env, LLAVA)
    assert prep.returncode == 0, prep.stderr
    arrow = prepared_inputs / "llava-aokvqa" / "aokvqa-train.arrow"
    assert f"copied {len(ROWS)} aokvqa rows of 1 parquet files" in prep.stdout
    table = pa.ipc.open_file(pa.memory_map(str(arrow))).read_all()
    assert table.num_rows == len(ROWS) and table.column_names == ["images", "texts"]
    again = run_with_pipe([python, "prepare.py", *argv], env, LLAVA)
    assert "already prepared" in again.stdout and not (prepared_inputs / "llava-tiny").exists()

    workers = ["--flops", "analytic", "--num-workers", "1"]  # rows decoded in a worker
    run = run_with_pipe([python, "main.py", *argv, *workers], env, LLAVA)
    assert run.returncode == 0, run.stderr[-3000:]
    (record,) = [r["inputs"] for r in run.records if r.get("task") == "inputs"]
    assert record["comparable"] and record["missing"] == []
    assert record["real"] == {"llava-1.5-7b": "e2214c2", "the-cauldron-aokvqa": "main"}
    assert "stand_in" not in record and "not comparable" not in run.stdout
    rates = run.rates()
    assert len(rates) == 3 and all(r["units"] == "items/s" and r["rate"] > 0 for r in rates)
    assert run.losses() and all(math.isfinite(x) for x in run.losses())
    assert f"batch 1 of {len(ROWS)} aokvqa conversations" in run.stdout

    # Upstream's processing of every row, in process: the prompt, <image> expanded to one
    # token per patch, each sample its own length from its own text.
    model, processor = llava.load_real(
        prepared_inputs / "inputs" / "llava-1.5-7b", torch.device("cpu"), torch.float32
    )
    shape = llava.checkpoint_shape(model.config)
    assert shape == llava.SIZES["tiny"]
    dataset = llava.Conversations(arrow)
    process = llava.Processed(processor, torch.device("cpu"))
    lengths = []
    for i, (size, mode, turns) in enumerate(ROWS):
        image, texts = dataset[i]
        assert (image.size, image.mode) == (size, mode)
        assert llava.chat_prompt(texts) == upstream_prompt(turns)
        batch = process([(image, texts)])
        ids = batch["input_ids"][0]
        assert batch["pixel_values"].shape == (1, 3, shape.image_size, shape.image_size)
        assert int((ids == shape.image_token).sum()) == shape.image_tokens == 16
        text = processor.tokenizer(upstream_prompt(turns))["input_ids"]
        assert text[0] == 1 and processor.tokenizer.unk_token_id not in text
        assert len(ids) == len(text) - 1 + shape.image_tokens  # <image> -> 16 tokens
        assert torch.equal(batch["labels"], batch["input_ids"])  # no pad in a batch of 1
        lengths.append(len(ids))
    assert len(set(lengths)) == len(ROWS)
    # a batch of two: padded on the left to the longer, pads out of the loss
    two = process([dataset[0], dataset[1]])
    pads = two["input_ids"] == shape.pad_token
    assert two["input_ids"].shape[1] == max(lengths[:2]) and pads.sum() == abs(
        lengths[0] - lengths[1]
    )
    assert pads[:, 0].any() and (two["labels"][pads] == -100).all()

    # The FLOPs record: the formula at the rows' mean text length
    mean = process.mean_text_len(dataset)
    assert mean == pytest.approx(sum(lengths) / len(lengths) - shape.image_tokens)
    (flops,) = [r for r in run.records if "flops_per_item" in r]
    assert flops["flops_per_item"] == pytest.approx(llava.analytic_flops(shape, round(mean)))


def test_llava_without_inputs_runs_the_stand_in(tmp_path, llava, python):
    """No input folder and no reachable hub: prepare.py says so (one line per input) and
    generates the stand-in; main.py trains on it and records it as not comparable."""
    data = tmp_path / "data"
    env = bench_env(
        stop=2, skip=1, MILABENCH_DIR_DATA=str(data), HF_ENDPOINT="http://127.0.0.1:9",
        HF_HUB_OFFLINE="1",
    )  # fmt: skip
    argv = ["--size", "tiny", "--text-len", "24", "--samples", "8", "--batch-size", "2"]
    argv += ["--precision", "fp32", "--device", "cpu"]
    prep = run_with_pipe([python, "prepare.py", *argv], env, LLAVA, timeout=120)
    assert prep.returncode == 0, prep.stderr
    said = [line for line in prep.stderr.splitlines() if line.strip()]
    assert [line.split()[2] for line in said] == ["llava-1.5-7b", "the-cauldron-aokvqa"]
    assert all(" for llava-single unavailable: " in line for line in said), said
    assert "generated 8 llava samples" in prep.stdout
    assert not (data / "llava-aokvqa").exists()

    run = run_with_pipe([python, "main.py", *argv], env, LLAVA)
    assert run.returncode == 0, run.stderr[-3000:]
    (record,) = [r["inputs"] for r in run.records if r.get("task") == "inputs"]
    assert not record["comparable"] and record["real"] == {}
    assert sorted(record["missing"]) == ["llava-1.5-7b", "the-cauldron-aokvqa"]
    assert "random-weight LLaVA" in record["stand_in"] and "24-24 text tokens" in record["stand_in"]
    assert "not comparable with upstream milabench" in run.stdout
    assert len(run.rates()) == 2
