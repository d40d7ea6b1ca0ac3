"""Training of LLaVA-1.5 (vision tower + projector + Llama), transformers: upstream's
model and data when prepared, else a random-weight stand-in on synthetic pairs.

**Upstream's inputs** (fetched by ``prepare.py``): llava-1.5-7b's weights in
``--precision``'s dtype and its processor; each step takes shuffled aokvqa rows (first
image, conversation written as upstream writes it: an ``<image>`` line, then ``Human:``
and ``Assistant:`` lines per turn) and runs the processor inside the timed step (CLIP
resize/crop/normalise on the CPU, ``<image>`` expanded per patch, ``padding=True``);
labels are the ids with pads at -100. **Stand-in** (announced as not comparable): random
weights of ``--size``'s shape on ``prepare.py``'s pairs, normalised on the device. Every
parameter trains: gradient norm clipped at 1.0, torch's AdamW (not fused, lr 5e-5,
weight decay 0.01); items/s, one item = one sample. ``--precision bf16`` keeps weights,
gradients and AdamW state in bf16, as upstream. By hand: ``python prepare.py --size tiny
&& python main.py --size tiny --precision fp32``.
"""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from shapes import (
    MODEL_INPUT,
    SIZES,
    Shape,
    data_folder,
    entry_name,
    real_data_file,
    real_inputs,
)

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare, declare_flops
from benchkit.memory import check_memory
from benchkit.shm import loader_prefetch, sampled_batch_bytes
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, init_distributed, setup, teardown_distributed
from benchshared.datasets import data_dir
from benchshared.inputs import announce

# CLIP's image normalisation (what the CLIP image processor applies).
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="7b")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--text-len", type=int, default=128, help="(prepare.py) text tokens")
    parser.add_argument("--min-text-len", type=int, default=None, help="(prepare.py) fewest")
    parser.add_argument("--samples", type=int, default=128, help="(prepare.py) data set size")
    parser.add_argument(
        "--data",
        default=None,
        help="default: $MILABENCH_DIR_DATA/llava-<size> (stand-in), .../llava-aokvqa (real)",
    )
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument(
        "--clip-grad", type=float, default=1.0, help="total gradient norm (0: no clipping)"
    )
    parser.add_argument(
        "--gradient-checkpointing", action="store_true", help="trade compute for memory"
    )
    parser.add_argument(
        "--flops",
        choices=("counted", "analytic"),
        default="analytic",
        help="FLOPs record: the shape's formula (default) or one counted step",
    )
    parser.add_argument("--backend", default=None, help="gloo, nccl, ... (default: by device)")
    add_common_arguments(parser, precisions=("fp32", "tf32", "bf16"), default_precision="bf16")
    return parser.parse_args(argv)


def llava_config(shape: Shape) -> Any:
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    vision = CLIPVisionConfig(
        hidden_size=shape.v_hidden,
        num_hidden_layers=shape.v_layers,
        num_attention_heads=shape.v_heads,
        intermediate_size=shape.v_intermediate,
        image_size=shape.image_size,
        patch_size=shape.patch_size,
        projection_dim=768,
        hidden_act="quick_gelu",
    )
    text = LlamaConfig(
        hidden_size=shape.t_hidden,
        num_hidden_layers=shape.t_layers,
        num_attention_heads=shape.t_heads,
        num_key_value_heads=shape.t_kv_heads,
        intermediate_size=shape.t_intermediate,
        vocab_size=shape.vocab,
        max_position_embeddings=shape.max_positions,
        rms_norm_eps=1e-5,
        pad_token_id=shape.pad_token,
        use_cache=False,
    )
    return LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=shape.image_token,
        image_seq_length=shape.image_tokens,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        pad_token_id=shape.pad_token,
    )


def build_model(shape: Shape, device: torch.device, dtype: torch.dtype) -> Any:
    """The model, created on ``device`` in ``dtype``: eight processes building a 7B model
    in fp32 in host memory (28 GB each) would not fit there."""
    from transformers import LlavaForConditionalGeneration

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return LlavaForConditionalGeneration(llava_config(shape))
    finally:
        torch.set_default_dtype(previous)


class Samples(torch.utils.data.Dataset):
    """The prepared arrays, memory-mapped: (image HWC uint8, input ids, labels)."""

    def __init__(self, root: str, shape: Shape) -> None:
        import numpy as np

        try:
            self.images = np.load(os.path.join(root, "images.npy"), mmap_mode="r")
            self.ids = np.load(os.path.join(root, "input_ids.npy"), mmap_mode="r")
            self.lengths = np.load(os.path.join(root, "lengths.npy"))
        except FileNotFoundError as exc:
            raise SystemExit(
                f"llava: no data in {root}: run prepare.py with the same arguments"
            ) from exc
        self.image_token = shape.image_token
        size = shape.image_size
        if self.images.shape[1:] != (size, size, 3):
            raise SystemExit(f"llava: images in {root} are not {size} px: run prepare.py again")
        placeholders = int((self.ids[0] == shape.image_token).sum())
        if placeholders != shape.image_tokens:
            raise SystemExit(
                f"llava: {placeholders} image tokens per sample in {root}, the model expects "
                f"{shape.image_tokens}: run prepare.py with the same --size"
            )

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        image = torch.from_numpy(self.images[i].copy())
        ids = torch.from_numpy(self.ids[i, : int(self.lengths[i])].astype("int64"))
        # The loss covers every text token, none of the image placeholders.
        labels = torch.where(ids == self.image_token, torch.full_like(ids, -100), ids)
        return image, ids, labels

    def mean_text_len(self, shape: Shape) -> float:
        return float(self.lengths.mean()) - shape.image_tokens


class PadCollate:
    """Stack a batch, the token ids padded to its longest sample (pad id; label -100), as
    the processor's ``padding=True`` and upstream's labels do."""

    def __init__(self, pad: int) -> None:
        self.pad = pad

    def __call__(self, samples: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        images = torch.stack([s[0] for s in samples])
        longest = max(s[1].numel() for s in samples)
        ids = torch.full((len(samples), longest), self.pad, dtype=torch.long)
        labels = torch.full((len(samples), longest), -100, dtype=torch.long)
        for row, (_, sample_ids, sample_labels) in enumerate(samples):
            ids[row, : sample_ids.numel()] = sample_ids
            labels[row, : sample_labels.numel()] = sample_labels
        return images, ids, labels


class Normalise:
    """uint8 HWC batches -> normalised float CHW pixels on the device (cheap there)."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        self.mean = torch.tensor(CLIP_MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(CLIP_STD, device=device).view(1, 3, 1, 1) * 255
        self.device, self.dtype = device, dtype

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        x = images.to(self.device, non_blocking=True).permute(0, 3, 1, 2).float()
        return ((x - self.mean) / self.std).to(self.dtype)


# -- upstream's inputs ---------------------------------------------------------------------


def checkpoint_shape(config: Any) -> Shape:
    """The `Shape` of a checkpoint's ``LlavaConfig`` (the FLOPs formula and the memory
    estimate of the model that runs)."""
    v, t = config.vision_config, config.text_config
    image_token = getattr(config, "image_token_id", None)
    if image_token is None:
        image_token = config.image_token_index
    pad = getattr(config, "pad_token_id", None)
    pad = getattr(t, "pad_token_id", None) if pad is None else pad
    return Shape(
        v.hidden_size, v.num_hidden_layers, v.num_attention_heads, v.intermediate_size,
        v.image_size, v.patch_size, t.hidden_size, t.num_hidden_layers,
        t.num_attention_heads, t.num_key_value_heads or t.num_attention_heads,
        t.intermediate_size, t.vocab_size, t.max_position_embeddings, image_token,
        -1 if pad is None else pad,
    )  # fmt: skip


def model_shape(args: argparse.Namespace) -> Shape:
    """The shape that runs: the checkpoint's when upstream's inputs are prepared, else
    ``--size``'s (footprint.py estimates the same model as main.py builds)."""
    found = real_inputs()
    if all(found.values()):
        from transformers import AutoConfig

        return checkpoint_shape(AutoConfig.from_pretrained(found[MODEL_INPUT]))
    return SIZES[args.size]


def chat_prompt(texts: list[dict[str, str]]) -> str:
    """Upstream's prompt of one the_cauldron row: ``<image>`` on its own line, then
    ``Human: <user>`` and ``Assistant: <assistant>`` lines for every turn, stripped."""
    lines = "".join(f"Human: {t['user']}\nAssistant: {t['assistant']}\n" for t in texts)
    return ("<image>\n" + lines).strip()


def decode_image(value: dict[str, Any]) -> Any:
    """A the_cauldron image cell ({bytes, path}) decoded as ``datasets``' ``Image``
    feature does: opened with Pillow and loaded, mode untouched (the processor converts
    to RGB)."""
    from PIL import Image

    data = value.get("bytes")
    image = Image.open(io.BytesIO(data)) if data is not None else Image.open(value["path"])
    image.load()
    return image


class Conversations(torch.utils.data.Dataset):
    """aokvqa rows of the prepared Arrow file, memory-mapped (opened again in each
    worker): item i is (its first image decoded, its conversation turns)."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise SystemExit(f"llava: no aokvqa rows in {path}: run prepare.py")
        self.path = path
        self._table: Any = None
        self.rows = self.table().num_rows

    def table(self) -> Any:
        if self._table is None:
            import pyarrow as pa

            self._table = pa.ipc.open_file(pa.memory_map(str(self.path))).read_all()
        return self._table

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_table": None}

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> tuple[Any, list[dict[str, str]]]:
        row = self.table().slice(i, 1).to_pylist()[0]
        return decode_image(row["images"][0]), row["texts"]

    def texts(self, count: int) -> list[list[dict[str, str]]]:
        """The conversations of the first ``count`` rows (no image decoded)."""
        return self.table().column("texts").slice(0, count).to_pylist()


def keep_samples(samples: list) -> list:
    """The batch as a list of (image, turns): the processor runs in the step."""
    return samples


class Processed:
    """Upstream's per-step processing: the checkpoint's processor on the batch's images
    and prompts (``padding=True``), labels = input ids with pads at -100, to the device."""

    def __init__(self, processor: Any, device: torch.device) -> None:
        self.processor = processor
        self.pad = processor.tokenizer.pad_token_id
        self.device = device

    def __call__(self, samples: list) -> dict[str, torch.Tensor]:
        images = [image for image, _ in samples]
        prompts = [chat_prompt(turns) for _, turns in samples]
        one = len(samples) == 1  # upstream's call: one prompt, one image
        inputs = self.processor(
            text=prompts[0] if one else prompts,
            images=images[0] if one else images,
            return_tensors="pt",
            padding=True,
        )
        labels = inputs["input_ids"].clone()
        labels[labels == self.pad] = -100
        inputs["labels"] = labels
        return {k: v.to(self.device, non_blocking=True) for k, v in inputs.items()}

    def mean_text_len(self, dataset: Conversations, count: int = 256) -> float:
        """Text tokens per sample (the ``<image>`` placeholder not counted), on average
        over the first ``count`` rows: tokenised without their images."""
        tokenizer = self.processor.tokenizer
        image = tokenizer.convert_tokens_to_ids(self.processor.image_token)
        lengths = [
            sum(1 for t in tokenizer(chat_prompt(turns))["input_ids"] if t != image)
            for turns in dataset.texts(count)
        ]
        return sum(lengths) / len(lengths)


def load_real(folder: Path, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    """The checkpoint's model (in ``dtype``, loaded onto ``device``) and processor."""
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    model = LlavaForConditionalGeneration.from_pretrained(folder, dtype=dtype, device_map=device)
    processor = AutoProcessor.from_pretrained(folder)
    if getattr(processor, "patch_size", None) is None:  # a processor saved before the
        # settings that expand <image> (the model expanded it then): the same tokens
        processor.patch_size = model.config.vision_config.patch_size
        processor.vision_feature_select_strategy = model.config.vision_feature_select_strategy
        processor.num_additional_image_tokens = 1  # CLIP's class token
    return model, processor


def analytic_flops(shape: Shape, text_len: int, *, attention: bool = True) -> float:
    """FLOPs of one sample's training step from the shape: 2 per weight per token forward,
    twice that backward; attention 4 * hidden per query-key pair and layer (vision: all
    pairs; text: causal pairs), the LM head over every position. What the backward skips
    is not counted: the input gradient of the patch convolution (pixels need none; its
    weight gradient is) and the last vision layer (features come from layer -2, its
    output is unused).

    Matches ``torch.utils.flop_counter`` exactly at tiny size when ``attention`` is false
    (the counter does not see the CPU's attention kernel; tests/benchmarks/test_rlhf.py).
    """
    v_tokens = shape.image_tokens + 1  # patches + CLS
    dv, fv = shape.v_hidden, shape.v_intermediate
    patch = 2 * 3 * shape.patch_size**2 * dv * shape.image_tokens
    v_layer = 2 * (4 * dv * dv + 2 * dv * fv) * v_tokens + attention * 4 * dv * v_tokens**2
    dt = shape.t_hidden
    projector = 2 * (dv * dt + dt * dt) * shape.image_tokens
    kv = dt * shape.t_kv_heads // shape.t_heads
    tokens = text_len + shape.image_tokens
    t_layer = 2 * (2 * dt * dt + 2 * dt * kv + 3 * dt * shape.t_intermediate) * tokens
    t_layer += attention * 4 * dt * tokens * (tokens + 1) // 2
    text = shape.t_layers * t_layer + 2 * dt * shape.vocab * tokens
    forward = patch + shape.v_layers * v_layer + projector + text
    backward = 2 * (forward - patch - v_layer) + patch  # the convolution: weight gradient
    return float(forward + backward)


def make_loader(
    args: argparse.Namespace, shape: Shape, rank: int, world: int, real: bool = False
) -> tuple[torch.utils.data.DataLoader, str]:
    """Shuffled batches (this rank's share under torchrun): of aokvqa rows with upstream's
    inputs (``real``), of the prepared stand-in pairs otherwise."""
    if real:
        path = real_data_file(args.data)
        dataset: torch.utils.data.Dataset = Conversations(path)
        root, collate = str(path), keep_samples
    else:
        root = args.data or data_dir(data_folder(args.size))
        dataset, collate = Samples(root, shape), PadCollate(shape.pad_token)
    sampler = None
    if world > 1:
        sampler = torch.utils.data.DistributedSampler(dataset, world, rank, seed=args.seed)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
        drop_last=True,
        collate_fn=collate,
        prefetch_factor=loader_prefetch(
            sampled_batch_bytes(dataset, args.batch_size), args.num_workers, label="llava"
        ),
    )
    if len(loader) == 0:  # every epoch would be empty: the loop would never end
        raise SystemExit(
            f"llava: {len(dataset)} samples in {root} make no batch of {args.batch_size} "
            f"on each of {world} ranks: prepare more (--samples)"
        )
    return loader, root


def declare_step_flops(
    args: argparse.Namespace,
    shape: Shape,
    loader: Any,
    step: Callable[[Any], Any],
    text_len: float | None = None,
) -> None:
    """The FLOPs record, before the timed loop: the formula by default (exact for the
    matmuls, device-independent, no extra step) at ``text_len`` text tokens per sample
    (default: the stand-in's mean), or one real forward + backward counted by torch's
    FLOP counter (``--flops counted``: the cost of one extra step; the counter sees
    attention on GPUs' flash / memory-efficient kernels, not on CPUs)."""
    if args.flops == "counted":
        first = next(iter(loader))
        count_and_declare(lambda: step(first), args.batch_size, precision=args.precision)
        return
    if text_len is None:
        text_len = loader.dataset.mean_text_len(shape)
    declare_flops(analytic_flops(shape, round(text_len)), precision=args.precision)


def make_optimizer(model: torch.nn.Module, args: argparse.Namespace) -> torch.optim.Optimizer:
    """Upstream's ``torch.optim.AdamW(model.parameters(), lr=5e-5)``: torch's defaults
    (weight decay 0.01, the foreach implementation on GPUs, not the fused one)."""
    return torch.optim.AdamW(model.parameters(), lr=args.lr)


def data_parallel(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DDP; the last vision layer's output is unused (features come from layer -2), so its
    parameters get no gradient: DDP must be told to look for unused parameters."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=True,
    )


def stand_in_phrase(args: argparse.Namespace) -> str:
    """What runs without upstream's inputs (the ``inputs`` record's ``stand_in``)."""
    low = args.min_text_len or args.text_len
    return (
        f"random-weight LLaVA of the {args.size} shape on synthetic images and random "
        f"token ids ({low}-{args.text_len} text tokens per sample)"
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    try:  # from here on, the process group is destroyed on every exit path
        setup(args, device=device)  # seed, threads, TF32 flags; no autocast (weights in dtype)
        used = real_inputs()
        real = all(used.values())
        check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
        dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
        if real:
            model, processor = load_real(used[MODEL_INPUT], device, dtype)
            shape = checkpoint_shape(model.config)
            prepare_batch: Callable[[Any], dict[str, torch.Tensor]] = Processed(processor, device)
        else:
            shape = SIZES[args.size]
            model = build_model(shape, device, dtype)
            normalise = Normalise(device, dtype)

            def prepare_batch(batch: Any) -> dict[str, torch.Tensor]:
                images, ids, labels = batch
                return {
                    "input_ids": ids.to(device, non_blocking=True),
                    "pixel_values": normalise(images),
                    "labels": labels.to(device, non_blocking=True),
                }

        loader, root = make_loader(args, shape, rank, world, real)
        if args.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        opt = make_optimizer(model, args)
        params = [p for p in model.parameters() if p.requires_grad]
        n_params = sum(p.numel() for p in model.parameters())
        text_len = prepare_batch.mean_text_len(loader.dataset) if real else None
        if rank == 0:
            if real:
                what = (
                    f"{MODEL_INPUT} from {used[MODEL_INPUT]} ({n_params / 1e9:.2f}B "
                    f"parameters), batch {args.batch_size} of {len(loader.dataset)} aokvqa "
                    f"conversations ({text_len:.1f} text tokens on average + "
                    f"{shape.image_tokens} image), processed in the step"
                )
            else:
                what = (
                    f"{args.size} ({n_params / 1e9:.2f}B parameters), batch {args.batch_size} x "
                    f"{len(loader.dataset.ids[0])} tokens at most ({shape.image_tokens} image)"
                )
            print(
                f"llava: {what}, {shape.image_size} px, data {root}, {args.num_workers} "
                f"workers, world size {world}, {args.precision} on {device}, "
                f"{torch.get_num_threads()} threads",
                flush=True,
            )

        def step(batch: Any) -> torch.Tensor:
            out = model(**prepare_batch(batch))
            out.loss.backward()
            return out.loss

        declare_step_flops(args, shape, loader, step, text_len)

        if world > 1:
            model = data_parallel(model, device)

        announce(entry_name(), used, stand_in=stand_in_phrase(args))
        count = len if real else (lambda b: b[1].shape[0])
        timed = TimedIterator(loader, batch_size_fn=count, device=device)
        epoch = 0
        while not timed.done:
            if loader.sampler is not None and hasattr(loader.sampler, "set_epoch"):
                loader.sampler.set_epoch(epoch)
            for batch in timed:
                opt.zero_grad(set_to_none=True)
                loss = step(batch)
                if args.clip_grad:
                    torch.nn.utils.clip_grad_norm_(params, args.clip_grad)
                opt.step()
                timed.record_loss(loss)
            epoch += 1
        if world > 1:
            import torch.distributed as dist

            dist.barrier()  # leave together: gloo aborts a peer still in a collective
    finally:
        model = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


if __name__ == "__main__":
    run_and_exit(main)
