"""Causal-LM training of a Llama-style decoder (transformers): pre-training steps, LoRA
fine-tuning (peft) and sharded full fine-tuning (FSDP).

The model comes from a `transformers.LlamaConfig` (RMSNorm, rotary embeddings, SwiGLU
MLP, grouped-query attention). ``--size`` picks the shape (``tiny`` for tests and CPUs;
``1b``/``3b``-class shapes; ``8b`` and ``70b``: Llama-3.1-8B's and -70B's published
shapes). Throughput is tokens/s of the whole job, padding included (upstream counts
batch x padded length).

* ``--weights NAME`` (default with ``--dataset``: the entry's weights input of
  `benchshared.catalogue.inputs_for`, ``llama3.1-8b`` / ``llama3.1-70b``): when
  `benchshared.inputs.locate` finds it and its ``config.json`` has ``--size``'s shape,
  the model takes that configuration (rotary scaling, norm epsilon, tying) and every
  tensor of its safetensors (`load_checkpoint`), cast to ``--param-dtype``: whole on
  one process, before the LoRA adapters are added; under FSDP each rank reads only the
  rows of its own shards (``get_slice``). Otherwise the weights are random (nothing is
  downloaded here: prepare.py fetches).

* ``--dataset NAME --tokenizer NAME`` (the fine-tuning entries: upstream's inputs, by
  their `benchshared.catalogue` names): when both are found (`benchshared.inputs.locate`)
  the batches are upstream's (`alpaca`: Alpaca samples in torchtune's template, tokenised
  by the Llama-3.1 tokenizer, read from prepare.py's pre-tokenised set, shuffled as
  torchtune's sampler, padded to each batch's longest, labels masked as torchtune;
  ``--max-seq-len`` truncates, ``--no-train-on-input`` masks the prompt) and the loss is
  upstream's: cross-entropy summed over the labelled tokens, the gradients divided by
  the step's labelled tokens of all ranks before the optimiser steps. Otherwise (and
  without ``--dataset``) ``--batch-size`` x ``--seq-len`` random tokens, each its own
  label: the stand-in. Rank 0 says which ran in an ``inputs`` record (weights,
  tokenizer and data set: comparable only when all three were used).

* ``--lora R``: peft LoRA adapters of rank R (alpha 2R, no dropout) on the q, v and
  output projections of attention and the three MLP projections (gate, up, down), not on
  k nor on the LM head (torchtune's ``lora_attn_modules: [q_proj, v_proj, output_proj]``,
  ``apply_lora_to_mlp: True``, upstream's recipes); the adapters are made in
  ``--param-dtype`` (torchtune builds them in the recipe's dtype); the base weights are
  frozen, only the adapters train.
* ``--grad-accum N``: the optimiser steps every N micro-batches (a timed step is one
  micro-batch; every N-th also pays for the optimiser step).
* ``--param-dtype bf16``: weights (and so gradients and optimiser state) in bf16, as the
  fine-tuning recipes of the upstream entries keep them.
* ``--gradient-checkpointing``: every decoder layer recomputed in the backward
  (non-reentrant, as torchtune's ``enable_activation_checkpointing``). With LoRA the
  frozen embeddings' output asks for no gradient (nothing below the first layer learns).
* ``--adamw fused|foreach``: torch's AdamW kernels on a GPU (weight decay 0.01, torch's
  default, as upstream's recipes). ``foreach`` (upstream's ``fused: False``) steps every
  tensor with multi-tensor kernels that make a temporary the size of the trained weights.
* Under torchrun (``WORLD_SIZE`` set): data-parallel by default (DDP over ``--backend``);
  ``--fsdp`` shards parameters, gradients and optimiser state instead (torch FSDP2,
  ``fully_shard`` per decoder layer, re-sharded after forward; the root unit keeps its
  weights gathered from forward to backward, as torchtune's ``shard_model``);
  ``--shard-embeddings`` makes the token embeddings and the LM head units of their own
  (torchtune's ``custom_sharded_layers: ['tok_embeddings', 'output']``);
  ``--cpu-offload`` keeps the shards in host memory (the optimiser steps on the CPU).
  Rank 0 reports the global tokens/s.
* Where the weights are made: a sharded model is built on the meta device (shapes, no
  storage), sharded there, and each rank then materialises only its own shards, in the
  ``--param-dtype`` asked for, on its GPU (or in host memory with ``--cpu-offload``) and
  initialises them (or fills them from ``--weights``); nothing the size of the whole
  model ever exists on a rank (a 70B in
  fp32 would be 280 GB per rank). Other models are built directly on the device, in
  ``--param-dtype``. Before that, `footprint` estimates the run's memory per GPU and per
  node from the model built on the meta device (`benchkit.memory`); an entry that cannot
  fit this node skips with the numbers.

Runs by hand too: ``python main.py --size tiny``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path

import torch

from benchkit.exiting import run_and_exit
from benchkit.flops import declare_flops
from benchkit.memory import (
    Footprint,
    LiveBytes,
    Workload,
    estimate,
    ranks,
    skip_unless_it_fits,
)
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, init_distributed, setup, teardown_distributed

SIZES = {
    # name: (hidden, layers, heads, kv heads, intermediate, vocab)
    "tiny": (128, 2, 4, 2, 344, 2048),
    "small": (512, 8, 8, 4, 1376, 32000),
    "1b": (2048, 16, 32, 8, 8192, 128256),
    "3b": (3072, 28, 24, 8, 8192, 128256),
    "8b": (4096, 32, 32, 8, 14336, 128256),  # Llama-3.1-8B
    "70b": (8192, 80, 64, 8, 28672, 128256),  # Llama-3.1-70B
}
PARAM_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument(
        "--gradient-checkpointing", action="store_true", help="trade compute for memory"
    )
    parser.add_argument(
        "--backend", default=None, help="collectives under torchrun (default: by device)"
    )
    parser.add_argument("--lora", type=int, default=0, metavar="RANK", help="LoRA rank (0: off)")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step")
    parser.add_argument("--param-dtype", choices=sorted(PARAM_DTYPES), default="fp32")
    parser.add_argument("--fsdp", action="store_true", help="shard with FSDP2 under torchrun")
    parser.add_argument(
        "--shard-embeddings",
        action="store_true",
        help="FSDP: the token embeddings and the LM head as units of their own",
    )
    parser.add_argument("--cpu-offload", action="store_true", help="FSDP shards in host memory")
    parser.add_argument(
        "--adamw",
        choices=("fused", "foreach"),
        default="fused",
        help="AdamW kernels on a GPU (foreach: torch's default, upstream's fused: False)",
    )
    parser.add_argument(
        "--dataset", default=None, help="upstream's Alpaca input (catalogue name; none: random)"
    )
    parser.add_argument("--tokenizer", default=None, help="its Llama-3.1 tokenizer input")
    parser.add_argument(
        "--weights",
        default=None,
        help="upstream's Llama-3.1 weights input (default: the entry's, with --dataset)",
    )
    parser.add_argument(
        "--max-seq-len", type=int, default=None, help="truncate samples (upstream: none)"
    )
    parser.add_argument(
        "--train-on-input",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the prompt takes loss too (torchtune's default)",
    )
    add_common_arguments(parser, default_precision="bf16")
    return parser.parse_args(argv)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Build modules with ``dtype`` weights (no fp32 copy made first)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def make_model(
    size: str,
    seq_len: int,
    layers: int | None = None,
    min_vocab: int = 0,
    checkpoint: Path | None = None,
):
    """The Llama of ``size`` (`SIZES`), with ``layers`` decoder layers instead of its own
    when given (the memory estimate's shallow copies) and a vocabulary of at least
    ``min_vocab`` (a tokenizer's ids on a small shape); returns (model, vocabulary).
    With a ``checkpoint`` folder, its ``config.json`` gives the configuration (rotary
    scaling, norm epsilon, tied embeddings as the checkpoint has them): its shape must be
    ``size``'s (ValueError otherwise). The weights are random either way
    (`load_checkpoint` fills them)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, depth, heads, kv_heads, intermediate, vocab = SIZES[size]
    vocab = max(vocab, min_vocab)
    if checkpoint is not None:
        config = LlamaConfig.from_pretrained(checkpoint)
        theirs = (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
                  config.num_key_value_heads, config.intermediate_size, config.vocab_size)  # fmt: skip
        if theirs[:5] != (hidden, depth, heads, kv_heads, intermediate) or theirs[5] < vocab:
            raise ValueError(
                f"the checkpoint in {checkpoint} has the shape {theirs} (hidden, layers, "
                f"heads, kv heads, intermediate, vocab), not --size {size}'s "
                f"{(hidden, depth, heads, kv_heads, intermediate)} with a vocabulary of at "
                f"least {vocab}"
            )
        vocab = config.vocab_size
        config.use_cache = False
        config.max_position_embeddings = max(config.max_position_embeddings, seq_len)
        if layers is not None:
            config.num_hidden_layers = layers
    else:
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            num_hidden_layers=depth if layers is None else layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            intermediate_size=intermediate,
            max_position_embeddings=max(2048, seq_len),
            rope_theta=500000.0,
            use_cache=False,
        )
    return LlamaForCausalLM(config), vocab


def checkpoint_files(folder: Path) -> dict[str, Path]:
    """Each tensor of the safetensors checkpoint in ``folder`` and the file that holds
    it: the index ``model.safetensors.index.json`` (``weight_map``) of a sharded one,
    else the keys of ``model.safetensors``."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return {name: folder / file for name, file in weight_map.items()}
    from safetensors import safe_open

    single = folder / "model.safetensors"
    with safe_open(single, framework="pt") as handle:
        return dict.fromkeys(handle.keys(), single)


def hf_name(name: str) -> str:
    """The checkpoint's name of a parameter of the model: transformers' own, the peft
    wrapper's prefix and ``base_layer`` step removed."""
    name = name.removeprefix("base_model.model.")
    return name.replace(".base_layer.", ".")


def local_rows(param: torch.Tensor) -> tuple[torch.Tensor, tuple[slice, ...]]:
    """The tensor this rank holds of ``param`` and where it sits in the whole: a DTensor's
    local shard (FSDP2: rows of dim 0, torch.chunk's split) and its index; a plain
    tensor and the whole range."""
    if not hasattr(param, "to_local"):
        return param, tuple(slice(0, n) for n in param.shape)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(
        param.shape, param.device_mesh, param.placements
    )
    return param.to_local(), tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))


@torch.no_grad()
def load_checkpoint(model, folder: Path) -> int:
    """Fill every parameter of ``model`` (LoRA adapters excepted: they keep their own
    initialisation) with the safetensors checkpoint in ``folder``, as ``from_pretrained``
    would: values cast to the parameter's dtype, copied in place on its device. A sharded
    parameter (DTensor) reads only its local shard, ``get_slice`` of those rows. A tensor
    the model has and the checkpoint lacks, one of another shape, or one the checkpoint
    has and the model lacks (tied heads and rotary buffers aside): ValueError. Returns the
    bytes read."""
    from safetensors import safe_open

    files = checkpoint_files(folder)
    wanted: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        if ".lora_" in name:
            continue
        key = hf_name(name)
        if key not in files:
            raise ValueError(f"{folder}: the checkpoint has no tensor {key}")
        wanted[key] = param
    tied = getattr(base_model(model).config, "tie_word_embeddings", False)
    extra = [k for k in files if k not in wanted and not k.endswith("rotary_emb.inv_freq")]
    extra = [k for k in extra if not (tied and k == "lm_head.weight")]
    if extra:
        raise ValueError(f"{folder}: tensors the model does not have: {', '.join(extra[:5])}")
    read = 0
    for path in sorted(set(files[k] for k in wanted)):
        with safe_open(path, framework="pt", device="cpu") as handle:
            for key in [k for k in wanted if files[k] == path]:
                param = wanted[key]
                part = handle.get_slice(key)
                if tuple(part.get_shape()) != tuple(param.shape):
                    raise ValueError(
                        f"{folder}: {key} is {tuple(part.get_shape())} in the checkpoint, "
                        f"{tuple(param.shape)} in the model"
                    )
                local, index = local_rows(param)
                if local.numel() == 0:
                    continue
                values = part[index] if index else handle.get_tensor(key)
                local.copy_(values)
                read += values.numel() * values.element_size()
    return read


#: The linear layers that get LoRA adapters, in transformers' names: torchtune's q_proj,
#: v_proj and output_proj (o_proj) of attention and w1, w3, w2 (gate_proj, up_proj,
#: down_proj) of the MLP; not k_proj, not the LM head (upstream's recipes).
LORA_TARGETS = ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def add_lora(model, rank: int):
    """peft LoRA adapters on `LORA_TARGETS` (alpha = 2 x rank, no dropout) in the dtype
    the model is built in (not upcast to fp32: ``autocast_adapter_dtype=False``); the
    base is frozen."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=list(LORA_TARGETS),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config, autocast_adapter_dtype=False)


def base_model(model):
    """The transformers model under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def fsdp_units(model, args: argparse.Namespace) -> list:
    """The modules `shard` makes FSDP units of, below the root: every decoder layer and,
    with ``--shard-embeddings``, the token embeddings and the LM head."""
    units = decoder_layers(model)
    if args.shard_embeddings:
        base = base_model(model)
        units += [base.get_input_embeddings(), base.get_output_embeddings()]
    return units


def shard(model, args: argparse.Namespace, device: torch.device):
    """FSDP2 as torchtune's ``shard_model``: the `fsdp_units` re-shard after their
    forward; the root (embeddings and head unless they are units, the final norm) keeps
    its weights gathered until the backward is done."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    options = {}
    if device.type == "cuda" and args.precision == "bf16" and args.param_dtype == "fp32":
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    if args.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    for unit in fsdp_units(model, args):
        fully_shard(unit, reshard_after_forward=True, **options)
    fully_shard(model, reshard_after_forward=False, **options)
    return model


def build(args: argparse.Namespace, where: torch.device, layers: int | None = None):
    """The model of ``args`` built on ``where`` (a device, or meta) in ``--param-dtype``,
    with checkpointing and LoRA adapters as asked (and ``layers`` decoder layers when
    given); returns (model, vocabulary size). With ``args.checkpoint`` (a weights input's
    folder) its configuration, and, built on a device, its weights, loaded before the
    adapters are added (``args.read_bytes``: the bytes read)."""
    checkpoint = getattr(args, "checkpoint", None)
    with torch.device(where), default_dtype(PARAM_DTYPES[args.param_dtype]):
        model, vocab = make_model(
            args.size, args.seq_len, layers, getattr(args, "min_vocab", 0), checkpoint
        )
        if checkpoint is not None and where.type != "meta":
            args.read_bytes = load_checkpoint(model, checkpoint)
        if args.gradient_checkpointing:
            checkpoint_layers(model)
        if args.lora:
            model = add_lora(model, args.lora)
    base = base_model(model)
    if getattr(base, "_require_grads_hooks", None) or hasattr(base, "_require_grads_hook"):
        # transformers and peft hook the embeddings so that their output asks for a
        # gradient (what reentrant checkpointing needs): removed, so that, as in
        # upstream's recipes, frozen embeddings make the first layer compute no input
        # gradient
        base.disable_input_require_grads()
    return model, vocab


def checkpoint_layers(model) -> None:
    """Activation checkpointing of every decoder layer, non-reentrant (torchtune's
    ``set_activation_checkpointing``)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    enable = enable or model.gradient_checkpointing_enable  # transformers < 5.23
    enable({"use_reentrant": False})


def decoder_layers(model) -> list:
    return [m for m in model.modules() if type(m).__name__ == "LlamaDecoderLayer"]


@torch.no_grad()
def initialise(model, buffer_device: torch.device) -> None:
    """Random weights for a model materialised from the meta device (``to_empty``): the
    transformers initialisation of every module (normal weights, unit norms, the rotary
    frequencies), then LoRA's own for the adapters (B = 0); sharded parameters initialise
    their local shards. The buffers (rotary frequencies, not sharded) go to
    ``buffer_device``, where the compute runs."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for module in model.modules():
        base._init_weights(module)
    # after every module: the adapters' own linear layers come after their LoRA layer in
    # the walk, and transformers' initialisation would leave B random, not zero
    for module in model.modules():
        if hasattr(module, "reset_lora_parameters"):
            for name in list(getattr(module, "lora_A", {})):
                module.reset_lora_parameters(name, True)
    for module in model.modules():
        for name, buf in list(module.named_buffers(recurse=False)):
            if buf is not None and buf.device != buffer_device:
                module.register_buffer(
                    name,
                    buf.to(buffer_device),
                    persistent=name not in module._non_persistent_buffers_set,
                )


def materialise_shards(model, args: argparse.Namespace, device: torch.device):
    """Shard the meta-device ``model`` (FSDP2), then make each rank's shards, only them:
    on its GPU, or in host memory with ``--cpu-offload``; initialised in place, then,
    with ``args.checkpoint``, filled from it: each rank reads its own rows of every
    tensor (`load_checkpoint`; ``args.read_bytes``), never a whole one."""
    model = shard(model, args, device)
    model.to_empty(device=torch.device("cpu") if args.cpu_offload else device)
    initialise(model, device)
    checkpoint = getattr(args, "checkpoint", None)
    if checkpoint is not None:
        args.read_bytes = load_checkpoint(model, checkpoint)
    return model


def local_bytes(model) -> int:
    """Bytes of the tensors this rank holds for ``model`` (its shards, under FSDP)."""
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def workload(args: argparse.Namespace, layers: int | None = None) -> Workload:
    """The model of ``args`` on the meta device and one step of a ``--batch-size`` x
    ``--seq-len`` batch (`benchkit.memory`: estimates, FLOP counts); with ``layers``, the
    same model cut to that many decoder layers (the estimate's shallow copies)."""
    model, _vocab = build(args, torch.device("meta"), layers)
    model.train()

    def step() -> None:
        ids = torch.zeros(args.batch_size, args.seq_len, dtype=torch.long)
        model(input_ids=ids, labels=ids).loss.backward()

    if layers is not None:
        return Workload([model], step, depth=layers)
    return Workload([model], step, depth=SIZES[args.size][1], at_depth=lambda n: workload(args, n))


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """Memory of this entry per GPU and per node (`benchkit.memory`): the model built on
    the meta device and one forward + backward of a ``--batch-size`` x ``--seq-len`` batch
    measured there, then the parallelism's share (DDP buckets; FSDP shards over ``world``
    ranks, two gathered units (`fsdp_units`) and the root's weights, gathered from
    forward to backward; CPU offload's shards in host memory) and the optimiser's (foreach
    AdamW's temporary at the step)."""
    sharded = world > 1 and args.fsdp
    foreach = args.adamw == "foreach" and not (sharded and args.cpu_offload)
    return estimate(
        lambda: workload(args),
        precision=args.precision,
        optimizer="adamw-foreach" if foreach else "adamw",
        parallel="fsdp" if sharded else ("ddp" if world > 1 else "none"),
        world=world,
        ranks_per_node=ranks_per_node,
        cpu_offload=sharded and args.cpu_offload,
        units=lambda work: fsdp_units(work.trained[0], args),
        built_on="meta" if sharded else "device",
        extra_gpu=root_bytes(args) if sharded else 0,
    )


def root_bytes(args: argparse.Namespace) -> int:
    """Bytes of the weights FSDP's root unit holds gathered through a step: the token
    embeddings and the LM head (unless they are units of their own) and the final norm;
    each rank keeps 1/world of them besides (counted with the shards)."""
    hidden, _layers, _heads, _kv, _intermediate, vocab = SIZES[args.size]
    size = PARAM_DTYPES[args.param_dtype].itemsize
    return size * (hidden + (0 if args.shard_embeddings else 2 * vocab * hidden))


def step_flops(model, tokens: int, lora: bool, seq_len: int = 0) -> float:
    """Analytic model FLOPs of one training step over ``tokens`` tokens in sequences of
    ``seq_len`` (0: attention left out), recomputation excluded.

    Full training: 6 x parameters per token (forward 2, backward 4). LoRA: the frozen
    base costs its forward (2) and the input gradients of its backward (2), except the
    first layer's projections that read its input (the frozen embeddings' output, which
    asks no gradient): forward only; the adapters cost the full 6; the embedding lookup
    costs nothing. Attention's two products add
    ``12 x layers x hidden x seq_len`` per token (forward 4, backward 8; the full square,
    as the FLOP counter and the usual MFU convention count it). Activation
    checkpointing's recomputed forwards are work of the device, not of the model: never
    counted. (Tests check this formula against `benchkit.flops.count_flops` at every
    LLM entry's shape, on the meta device.)"""
    embed = model.get_input_embeddings().weight.numel()
    total = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    config = model.config
    attention = 12.0 * config.num_hidden_layers * config.hidden_size * seq_len * tokens
    if not lora:
        return 6.0 * (total - embed) * tokens + attention
    # frozen embeddings: the first layer's input asks no gradient, so its projections
    # that read it (q, k, v; gate, up) compute none
    first = decoder_layers(model)[0]
    reads_input = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
    no_input_grad = sum(
        p.numel()
        for name, p in first.named_parameters()
        if not p.requires_grad and set(name.split(".")) & set(reads_input)
    )
    frozen = total - trained - embed
    return (4.0 * frozen - 2.0 * no_input_grad + 6.0 * trained) * tokens + attention


def entry_name() -> str:
    """The suite entry this process runs (``MILABENCH_CONFIG``'s name; ``llm`` by hand)."""
    from benchshared.datasets import entry_config

    return str(entry_config().get("name") or "llm")


def upstream_batches(args: argparse.Namespace, rank: int, world: int):
    """Upstream's batches for this rank when ``--dataset`` and ``--tokenizer`` are found
    (`alpaca.SFTBatches` over prepare.py's pre-tokenised set, or over the samples
    tokenised now when it has not run), else None; and the inputs asked for, each with
    its folder or None (`benchshared.inputs.announce`'s ``used``)."""
    from benchshared.inputs import locate

    used = {args.dataset: locate(args.dataset), args.tokenizer or "tokenizer": None}
    if args.tokenizer:
        used[args.tokenizer] = locate(args.tokenizer)
    if any(folder is None for folder in used.values()):
        return None, used
    from alpaca import SFTBatches, load_tokenised, tokenised_folder

    dataset, tokenizer = used[args.dataset], used[args.tokenizer]
    root = Path(os.environ.get("MILABENCH_DIR_DATA", "data"))
    folder = tokenised_folder(root, args.dataset, args.tokenizer)
    samples, from_disk = load_tokenised(dataset, tokenizer, folder)
    if rank == 0 and not from_disk:
        print(f"llm: {folder} not prepared: tokenised {len(samples)} samples now", flush=True)
    batches = SFTBatches(
        samples, args.batch_size, rank, world, args.train_on_input, args.max_seq_len
    )
    return batches, used


def weights_input(args: argparse.Namespace) -> str | None:
    """The weights input this run loads: ``--weights``, else (with ``--dataset``) the
    input that `benchshared.catalogue.inputs_for` lists for the entry besides the data
    set and the tokenizer (``llama3.1-8b`` / ``llama3.1-70b``); None: random weights."""
    if args.weights or not args.dataset:
        return args.weights
    from benchshared.catalogue import inputs_for

    others = [n for n in inputs_for(entry_name()) if n not in (args.dataset, args.tokenizer)]
    return others[0] if others else None


def usable_checkpoint(args: argparse.Namespace, weights: str, rank: int) -> Path | None:
    """The folder of the weights input ``weights`` when it is there (`locate`) and of
    ``--size``'s shape; None otherwise (rank 0 says why when the shape differs): the
    model keeps random weights."""
    from benchshared.inputs import locate

    folder = locate(weights)
    if folder is None:
        return None
    try:
        with torch.device("meta"):
            make_model(args.size, args.seq_len, 0, getattr(args, "min_vocab", 0), folder)
    except ValueError as exc:
        if rank == 0:
            print(f"llm: {weights} not used (random weights): {exc}", flush=True)
        return None
    return folder


def stand_in(used: dict[str, Path | None], weights: str | None, seq_len: int) -> str:
    """What ran instead of upstream's missing inputs, in one phrase: random weights
    and/or random token sequences."""
    parts = []
    if weights is not None and used.get(weights) is None:
        parts.append("random weights")
    if any(folder is None for name, folder in used.items() if name != weights):
        parts.append(f"{seq_len}-token random sequences")
    return ", ".join(parts) or "nothing"


def flops_per_token(model, lora: bool, lengths: list[int]) -> float:
    """`step_flops` per token averaged over batches of sequences padded to ``lengths``,
    weighted by their tokens (equal batch sizes): the per-token cost plus
    attention's, which grows with each batch's length (the formula is linear in it)."""
    base = step_flops(model, 1, lora, 0)
    attention = step_flops(model, 1, lora, 1) - base
    return base + attention * sum(n * n for n in lengths) / sum(lengths)


def scale_grads(params: list[torch.Tensor], factor: torch.Tensor) -> None:
    """Multiply every gradient by ``factor`` (a 0-d tensor on their device) in place, the
    local shard of a sharded one (torchtune's ``scale_grads``, foreach kernels)."""
    grads = [p.grad for p in params if p.grad is not None]
    local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
    if local:
        torch._foreach_mul_(local, factor.to(local[0].device))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    run = setup(args, device=device)
    distributed = "WORLD_SIZE" in os.environ
    real, used = (None, {})
    if args.dataset:
        real, used = upstream_batches(args, rank, world)
    lengths: list[int] = []
    if real is not None:
        # this rank's epoch (the FLOPs' average); the memory estimate and the model's
        # positions: the longest sample, the same on every rank, so that they all skip or
        # none does (the batch that holds it pads to it)
        lengths = real.padded_lengths(0).tolist()
        args.seq_len = int(real.data.lengths(args.max_seq_len).max())
        args.min_vocab = int(real.data.tokens.max()) + 1
    weights = weights_input(args)
    if weights is not None:
        used[weights] = args.checkpoint = usable_checkpoint(args, weights, rank)

    if args.cpu_offload and device.type == "cpu":
        args.cpu_offload = False  # the shards are in host memory already
    sharded = distributed and args.fsdp
    skip_unless_it_fits(lambda: footprint(args, *ranks()), device, label=f"llm {args.size}")
    lora = bool(args.lora)
    if not lengths:
        lengths = [args.seq_len]
    if sharded:
        # counted: every tensor this rank makes while it builds (its shards, nothing more)
        with LiveBytes(meta=False) as startup:  # what holds memory: not meta
            model, vocab = build(args, torch.device("meta"))
            per_token = flops_per_token(model, lora, lengths)
            whole = sum(p.numel() * p.element_size() for p in model.parameters())
            model = materialise_shards(model, args, device)
    else:
        model, vocab = build(args, device)
        per_token = flops_per_token(model, lora, lengths)
    model.train()
    if distributed and not args.fsdp:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    trained = [p for p in model.parameters() if p.requires_grad]
    # fused: one kernel per group of tensors; foreach (fused=False on a GPU): torch's
    # multi-tensor kernels; with CPU offload the step runs on the CPU
    fused = device.type == "cuda" and not args.cpu_offload and args.adamw == "fused"
    opt = torch.optim.AdamW(trained, lr=args.lr, fused=fused)
    scaler = run.grad_scaler()
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        n_trained = sum(p.numel() for p in trained)
        mode = "fsdp" if distributed and args.fsdp else ("ddp" if distributed else "single")
        shape = f"{args.batch_size}x{args.seq_len}"
        if real is not None:
            mean = sum(lengths) / len(lengths)
            longest = max(lengths)
            shape = f"{args.batch_size}x(padded to each batch's longest: "
            shape += f"mean {mean:.1f}, max {longest})"
        print(
            f"llm: {args.size} ({n_params / 1e6:.1f}M parameters"
            f"{'' if n_trained == n_params else f', {n_trained / 1e6:.2f}M trained'}), "
            f"{mode}, batch {shape}, accumulation {args.grad_accum}, "
            f"{args.precision} on {device} ({args.param_dtype} weights), "
            f"{torch.get_num_threads()} threads",
            flush=True,
        )
        if real is not None:
            print(
                f"llm: {args.dataset} ({len(real.data)} samples) by {args.tokenizer}, "
                f"{len(real)} batches an epoch on rank 0",
                flush=True,
            )
        declare_flops(per_token, precision=args.precision, source="analytic")
    if sharded:  # every rank: what it holds and the most it ever made while starting
        print(
            f"llm rank {rank}: materialised {local_bytes(model)} of {whole} bytes of "
            f"weights, start-up peak {startup.peak} bytes",
            flush=True,
        )
    if getattr(args, "checkpoint", None) is not None and (sharded or rank == 0):
        print(
            f"llm rank {rank}: weights of {weights} loaded from {args.checkpoint} "
            f"({args.read_bytes} bytes read)",
            flush=True,
        )
    if used:
        from benchshared.inputs import announce

        announce(entry_name(), used, stand_in=stand_in(used, weights, args.seq_len))

    try:
        if real is None:
            timed = synthetic_loop(args, model, opt, scaler, run, vocab, device, rank)
        else:
            timed = upstream_loop(args, model, opt, scaler, run, real, trained, device, world)
    finally:
        model = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


def synthetic_loop(args, model, opt, scaler, run, vocab: int, device, rank: int):
    """The stand-in: ``--batch-size`` x ``--seq-len`` random tokens, each sequence its
    own labels (the model shifts them), the mean loss per micro-batch."""
    gen = torch.Generator().manual_seed(args.seed + rank)
    pool = [
        torch.randint(0, vocab, (args.batch_size, args.seq_len), generator=gen).to(device)
        for _ in range(4)
    ]
    # A timed step is one micro-batch; every `--grad-accum`-th one also runs the optimiser
    # step, so the rate (tokens/s) includes its cost, spread as it is in training, and a
    # large accumulation still gives many observations inside the window.
    timed = TimedIterator(
        itertools.cycle(pool), batch_size_fn=lambda ids: ids.numel(), device=device, units="Tok/s"
    )
    for i, ids in enumerate(timed):
        with run.autocast():
            loss = model(input_ids=ids, labels=ids).loss
        scaler.scale(loss / args.grad_accum).backward()
        if (i + 1) % args.grad_accum == 0:
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
        timed.record_loss(loss)
    return timed


def upstream_loop(args, model, opt, scaler, run, real, trained, device, world: int):
    """Upstream's recipe loop over `alpaca.SFTBatches` (epoch after epoch): each batch
    moved to the device, cross-entropy summed over its labelled tokens (labels already
    shifted, -100 ignored), backward; every ``--grad-accum`` batches the labelled tokens
    and the summed loss are all-reduced over the ranks, the gradients multiplied by
    ranks / tokens, the optimiser steps and the step's loss is read (``.item()``, as
    upstream logs it). A timed step is a batch, counted as batch x padded length."""
    import torch.nn.functional as F

    timed = TimedIterator(
        real, batch_size_fn=lambda batch: batch[0].numel(), device=device, units="Tok/s"
    )
    num_tokens = torch.zeros((), dtype=torch.long, device=device)
    running = torch.zeros((), dtype=torch.float32, device=device)
    i = 0
    while not timed.done:
        for tokens, labels in timed:
            tokens, labels = tokens.to(device), labels.to(device)
            num_tokens += (labels != -100).sum()
            with run.autocast():
                logits = model(input_ids=tokens).logits
            loss = F.cross_entropy(
                logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
            )
            del logits
            running += loss.detach()
            scaler.scale(loss).backward()
            i += 1
            if i % args.grad_accum == 0:
                if world > 1:
                    torch.distributed.all_reduce(num_tokens)
                    torch.distributed.all_reduce(running)
                # DDP and FSDP average the ranks' gradients: x world undoes it
                scale_grads(trained, world / num_tokens.clamp(min=1))
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
                timed.record_loss(running.item() / max(int(num_tokens), 1))
                num_tokens.zero_()
                running.zero_()
    return timed


if __name__ == "__main__":
    run_and_exit(main)
