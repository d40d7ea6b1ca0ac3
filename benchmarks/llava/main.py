"""Training of a randomly initialised LLaVA-1.5 (vision tower + projector + Llama), transformers.

The model is ``transformers.LlavaForConditionalGeneration`` built from a ``LlavaConfig``
(``--size 7b``: llava-1.5-7b's shape, CLIP ViT-L/14-336 + Vicuna-7B; ``tiny`` for tests
and CPUs) with random weights. It trains with the language-modelling loss on the
(image, token sequence) pairs that ``prepare.py`` wrote: images decoded from ``.npy``,
normalised with CLIP's mean and std on the device, the image placeholders in the token
ids replaced by the projected patch features inside the model; each sample keeps its own
length (a batch is padded to its longest, pads out of the loss). Every parameter trains,
as upstream's step does: the gradient norm clipped at 1.0 over all parameters, then
torch's AdamW (not fused: lr 5e-5, weight decay 0.01). Throughput: items/s, one item =
one (image, text) sample.

``--precision bf16`` keeps the weights, gradients and optimiser state in bf16 (what
loading the checkpoint with ``torch_dtype=bfloat16`` and training it gives): fp32 master
weights plus AdamW for 7B parameters would need 112 GB, more than an 80 GB GPU has.

Runs by hand too: ``python prepare.py --size tiny && python main.py --size tiny
--precision fp32``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import torch
from shapes import SIZES, Shape, data_folder

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare, declare_flops
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, init_distributed, setup, teardown_distributed
from benchshared.datasets import data_dir

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
    parser.add_argument("--data", default=None, help="default: $MILABENCH_DIR_DATA/llava-<size>")
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
    args: argparse.Namespace, shape: Shape, rank: int, world: int
) -> tuple[torch.utils.data.DataLoader, str]:
    """Shuffled batches of the prepared samples (this rank's share under torchrun)."""
    root = args.data or data_dir(data_folder(args.size))
    dataset = Samples(root, shape)
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
        collate_fn=PadCollate(shape.pad_token),
    )
    if len(loader) == 0:  # every epoch would be empty: the loop would never end
        raise SystemExit(
            f"llava: {len(dataset)} samples in {root} make no batch of {args.batch_size} "
            f"on each of {world} ranks: prepare more (--samples)"
        )
    return loader, root


def declare_step_flops(
    args: argparse.Namespace, shape: Shape, loader: Any, step: Callable[[Any], Any]
) -> None:
    """The FLOPs record, before the timed loop: the formula by default (exact for the
    matmuls, device-independent, no extra step), or one real forward + backward counted
    by torch's FLOP counter (``--flops counted``: the cost of one extra step; the counter
    sees attention on GPUs' flash / memory-efficient kernels, not on CPUs)."""
    if args.flops == "counted":
        first = next(iter(loader))
        count_and_declare(lambda: step(first), args.batch_size, precision=args.precision)
        return
    text_len = round(loader.dataset.mean_text_len(shape))  # per sample, on average
    declare_flops(analytic_flops(shape, text_len), precision=args.precision)


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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    try:  # from here on, the process group is destroyed on every exit path
        setup(args, device=device)  # seed, threads, TF32 flags; no autocast (weights in dtype)
        check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
        dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
        shape = SIZES[args.size]
        loader, root = make_loader(args, shape, rank, world)

        model = build_model(shape, device, dtype)
        if args.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        model.train()
        normalise = Normalise(device, dtype)
        opt = make_optimizer(model, args)
        params = [p for p in model.parameters() if p.requires_grad]
        n_params = sum(p.numel() for p in model.parameters())
        if rank == 0:
            print(
                f"llava: {args.size} ({n_params / 1e9:.2f}B parameters), batch {args.batch_size} x "
                f"{len(loader.dataset.ids[0])} tokens at most ({shape.image_tokens} image), "
                f"{shape.image_size} px, data {root}, {args.num_workers} workers, world size "
                f"{world}, {args.precision} on {device}, {torch.get_num_threads()} threads",
                flush=True,
            )

        def step(batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
            images, ids, labels = batch
            out = model(
                input_ids=ids.to(device, non_blocking=True),
                pixel_values=normalise(images),
                labels=labels.to(device, non_blocking=True),
            )
            out.loss.backward()
            return out.loss

        declare_step_flops(args, shape, loader, step)

        if world > 1:
            model = data_parallel(model, device)

        timed = TimedIterator(loader, batch_size_fn=lambda b: b[1].shape[0], device=device)
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
