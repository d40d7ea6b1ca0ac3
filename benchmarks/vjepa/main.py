"""V-JEPA training step on a video ViT-H/16, in plain torch, as upstream milabench runs
jepa's ``app/vjepa/train.py`` with ``vith16.yaml``: a context encoder on the visible
tubelets, a narrow predictor, an EMA target encoder on the whole clip, L1 loss on the
masked tubelets' features, for two mask sets per batch.

The standard suite's vjepa-single / -gpus entries. facebookresearch's jepa repository is
not on the package registries; this is its training step on `benchshared.vit`:

* data (`VideoClips`, in ``--num-workers`` DataLoader workers): the mp4 videos that
  ``prepare.py`` writes (upstream's ``FakeVideo``: 640 x 480 uniform noise, 300 frames)
  decoded with decord, 16 frames 4 apart from a random window, random resized crop to
  224 px (scale 0.3-1, ratio 0.75-1.35, bilinear), flip, normalised, float32; the collate
  (`MaskCollator`, jepa's ``multiblock3d``) draws two mask sets per batch: set 1 hides 8
  blocks of 15% of the 14 x 14 grid, set 2 hides 2 blocks of 70% (aspect 0.75-1.5, every
  frame: temporal scale 1); one block size per set and batch, positions per clip; the
  context of a clip is what its blocks leave visible; every clip's context and target
  lists are cut to the shortest in the batch.
* models: ViT-H/16 encoder (1280 wide, 32 blocks, 16 heads, tubelets of 2 x 16 x 16:
  1568 per clip), a predictor of 12 blocks 384 wide with the encoder's 16 heads and a
  mask token per mask set, the target encoder an EMA copy (0.998).
* step (bf16 autocast, a loss scaler as jepa's ``init_opt`` builds one for mixed
  precision): the target's layer-normed features of every tubelet, gathered at each
  set's targets; the encoder (patch embedding included) and the predictor run once per
  mask set; the loss is the mean over the sets of the mean absolute error (jepa's
  ``loss_exp`` 1), plus jepa's variance regulariser with weight 0; AdamW (no weight
  decay on biases and 1-D parameters); then jepa's per-step statistics (the norm of
  every weight gradient and the mean of both AdamW moments of every parameter, each
  read on the host; the clips' variance, reduced over the ranks) and its EMA, parameter
  by parameter. Gradient clipping starts after jepa's 40 warm-up epochs: never within a
  benchmark.

Throughput: clips/s. Under torchrun the encoder and predictor train with DDP (static
graph: each runs twice a step) and rank 0 reports the global rate. ``--arch tiny`` for
CPUs.

Passes over the videos (`benchshared.datasets.timed_passes`): the set is upstream's 1,000
videos, so on 8 GPUs a rank's pass is 125 videos, 5 batches of 24. Each pass is one
epoch of the timed iterator: its first batch, for which a loader worker decodes 24
videos while the GPU waits, is fetched before the clock restarts, as upstream's
benchmate timer fetches it before its first event (jepa's loop makes a new iterator per
pass). The rest of the pass is timed; the last step of a pass ends when the loader
says the pass is over.
"""

from __future__ import annotations

import argparse
import copy
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare
from benchkit.memory import check_memory
from benchkit.shm import loader_prefetch, sampled_batch_bytes
from benchkit.timing import TimedIterator
from benchkit.torchsetup import (
    PRECISIONS,
    add_common_arguments,
    init_distributed,
    setup,
    teardown_distributed,
)
from benchshared.datasets import data_dir, timed_passes
from benchshared.vision import MEAN, STD
from benchshared.vit import ARCHES, build_vit, gather_tokens


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(ARCHES), default="huge")
    parser.add_argument("--predictor", choices=sorted(ARCHES), default="small")
    parser.add_argument("--patch", type=int, default=16)
    parser.add_argument("--tubelet", type=int, default=2)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--frame-step", type=int, default=4, help="jepa's sampling_rate")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=24, help="clips per device")
    parser.add_argument("--mask-blocks", type=int, nargs="+", default=[8, 2], help="per set")
    parser.add_argument("--mask-scale", type=float, nargs="+", default=[0.15, 0.7],
                        help="spatial share of each block, per set")  # fmt: skip
    parser.add_argument("--mask-aspect", type=float, nargs=2, default=[0.75, 1.5])
    parser.add_argument("--momentum", type=float, default=0.998, help="target EMA")
    parser.add_argument("--lr", type=float, default=2e-4, help="jepa's start_lr")
    parser.add_argument("--weight-decay", type=float, default=0.04)
    parser.add_argument("--dataset", default=None, help="video_metainfo.csv (default: FakeVideo)")
    parser.add_argument("--num-workers", type=int, default=12)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--backend", default=None, help="collectives under torchrun")
    # prepare.py's options (the same argv reaches both scripts): accepted, unused here
    for name in ("--videos", "--video-frames", "--video-width", "--video-height", "--clips"):
        parser.add_argument(name, type=int, default=None, help=argparse.SUPPRESS)
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"], default_precision="bf16")
    args = parser.parse_args(argv)
    if len(args.mask_blocks) != len(args.mask_scale):
        parser.error("--mask-blocks and --mask-scale need one value per mask set")
    return args


# -- data ---------------------------------------------------------------------------------


def frame_indices(length: int, frames: int, step: int) -> np.ndarray:
    """jepa's ``VideoDataset.loadvideo_decord`` for one clip: ``frames`` indices evenly
    spread over a random window of ``frames x step`` frames; a shorter video repeats its
    last frame."""
    span = frames * step
    if length > span:
        end = np.random.randint(span, length)
        start = end - span
        index = np.linspace(start, end, num=frames)
        return np.clip(index, start, end - 1).astype(np.int64)
    index = np.linspace(0, length, num=length // step)
    index = np.concatenate((index, np.ones(frames - length // step) * length))
    return np.clip(index, 0, length - 1).astype(np.int64)


def crop_box(height: int, width: int, scale: tuple, ratio: tuple) -> tuple[int, int, int, int]:
    """jepa's ``_get_param_spatial_crop`` (log-uniform ratio, central fallback):
    ``(top, left, h, w)``."""
    import random

    area = height * width
    for _ in range(10):
        target = random.uniform(*scale) * area
        aspect = math.exp(random.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return random.randint(0, height - h), random.randint(0, width - w), h, w
    if width / height < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif width / height > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class VideoClips(torch.utils.data.Dataset):
    """The videos listed in the CSV (``path label``, paths relative to it), each read as
    one clip by jepa's ``VideoDataset`` and ``VideoTransform`` (module docstring):
    float32 ``[3, T, S, S]``, normalised."""

    def __init__(self, csv: Path, args: argparse.Namespace) -> None:
        if not csv.is_file():
            raise SystemExit(f"no video list at {csv}: run prepare.py first")
        self.paths = [csv.parent / line.split()[0] for line in csv.read_text().splitlines()]
        self.frames, self.step, self.size = args.frames, args.frame_step, args.image_size
        self.mean = torch.tensor(MEAN).view(3, 1, 1, 1) * 255
        self.std = torch.tensor(STD).view(3, 1, 1, 1) * 255

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        from decord import VideoReader, cpu

        reader = VideoReader(str(self.paths[index]), num_threads=-1, ctx=cpu(0))
        reader.seek(0)
        frames = reader.get_batch(list(frame_indices(len(reader), self.frames, self.step)))
        buffer = torch.tensor(frames.asnumpy(), dtype=torch.float32).permute(3, 0, 1, 2)
        top, left, h, w = crop_box(buffer.shape[2], buffer.shape[3], (0.3, 1.0), (0.75, 1.35))
        crop = buffer[:, :, top : top + h, left : left + w]
        clip = F.interpolate(
            crop, size=(self.size, self.size), mode="bilinear", align_corners=False
        )
        if np.random.uniform() < 0.5:
            clip = clip.flip(-1)
        return clip.sub_(self.mean).div_(self.std)


class MaskCollator:
    """jepa's ``multiblock3d.MaskCollator`` over ``(T, H, W)`` tubelets: for each mask
    set, ``(context [B, Kc], targets [B, Kt])`` token indices (module docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.duration = args.frames // args.tubelet
        self.side = args.image_size // args.patch
        self.sets = list(zip(args.mask_blocks, args.mask_scale, strict=True))
        self.aspect = tuple(args.mask_aspect)
        self.calls = 0

    def block_size(self, scale: float, gen: torch.Generator) -> tuple[int, int, int]:
        """One block shape for the whole batch (``_sample_block_size``, temporal 1.0)."""
        torch.rand(1, generator=gen)  # the temporal scale's draw (its range is [1, 1])
        torch.rand(1, generator=gen)  # the spatial scale's (a single value)
        keep = int(self.side * self.side * scale)
        ratio = self.aspect[0] + torch.rand(1, generator=gen).item() * (
            self.aspect[1] - self.aspect[0]
        )
        h = min(self.side, int(round(math.sqrt(keep * ratio))))
        w = min(self.side, int(round(math.sqrt(keep / ratio))))
        return self.duration, h, w

    def masks(self, batch: int, blocks: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        t, h, w = self.block_size(scale, torch.Generator().manual_seed(self.calls))
        context, targets = [], []
        while len(context) < batch:
            visible = torch.ones(self.duration, self.side, self.side, dtype=torch.int32)
            for _ in range(blocks):
                top = int(torch.randint(0, self.side - h + 1, (1,)))
                left = int(torch.randint(0, self.side - w + 1, (1,)))
                start = int(torch.randint(0, self.duration - t + 1, (1,)))
                visible[start : start + t, top : top + h, left : left + w] = 0
            visible = visible.flatten()
            if visible.any():  # an empty context is drawn again
                context.append(torch.nonzero(visible).squeeze(-1))
                targets.append(torch.argwhere(visible == 0).squeeze(-1))
        kc, kt = min(len(c) for c in context), min(len(t) for t in targets)
        return torch.stack([c[:kc] for c in context]), torch.stack([t[:kt] for t in targets])

    def __call__(self, clips: list) -> tuple:
        batch = torch.utils.data.default_collate(clips)
        sets = [self.masks(len(clips), blocks, scale) for blocks, scale in self.sets]
        return batch, [c for c, _ in sets], [t for _, t in sets]


# -- models -------------------------------------------------------------------------------


class Predictor(nn.Module):
    """jepa's ``VisionTransformerPredictor``: context features projected to the
    predictor's width plus their positions, a mask token (one per mask set) plus the
    positions of the targets, the blocks over both, norm, the targets projected back to
    the encoder's width. Heads: the encoder's (jepa's ``init_video_model``)."""

    def __init__(self, arch: str, enc_arch: str, tokens: int, sets: int) -> None:
        super().__init__()
        enc_dim, _, enc_heads, _, _ = ARCHES[enc_arch]
        self.vit = build_vit(arch, patch=1, max_tokens=tokens, heads=enc_heads)
        self.vit.patch = nn.Identity()  # it reads features, not pixels (no unused weights)
        self.vit.pos.requires_grad_(False)  # jepa's sin-cos positions are fixed
        dim = self.vit.dim
        self.embed = nn.Linear(enc_dim, dim)
        self.mask_tokens = nn.ParameterList(
            nn.Parameter(torch.zeros(1, 1, dim)) for _ in range(sets)
        )
        self.out = nn.Linear(dim, enc_dim)

    def forward(self, context: torch.Tensor, keep: torch.Tensor, hide: torch.Tensor, index: int):
        b = context.shape[0]
        pos = self.vit.pos.expand(b, -1, -1)
        x = self.embed(context) + gather_tokens(pos, keep)
        tokens = self.mask_tokens[index % len(self.mask_tokens)].expand(b, pos.shape[1], -1)
        x = torch.cat([x, gather_tokens(tokens, hide) + gather_tokens(pos, hide)], dim=1)
        x = self.vit.run_blocks(x)
        return self.out(x[:, keep.shape[-1] :])


def build(
    args: argparse.Namespace, tokens: int, depth: int | None = None
) -> tuple[nn.Module, Predictor]:
    """The encoder (its positions fixed, as jepa's) and the predictor; with ``depth``, an
    encoder of that many blocks (`build_vit`)."""
    encoder = build_vit(
        args.arch, patch=args.patch, tubelet=args.tubelet, max_tokens=tokens,
        checkpointing=args.gradient_checkpointing, depth=depth,
    )  # fmt: skip
    encoder.pos.requires_grad_(False)
    return encoder, Predictor(args.predictor, args.arch, tokens, len(args.mask_blocks))


def analytic_flops(args: argparse.Namespace, sets: list[tuple[int, int]]) -> int:
    """Model FLOPs of one clip's training step from the shapes (no recomputation), for
    mask sets that keep ``kept`` tubelets and hide ``hidden`` (``sets``: one pair per
    set). Per set: the encoder's patch embedding over the whole clip (its forward and
    its weight gradient), its blocks over the kept tubelets, forward and backward (3x);
    the predictor's input projection on the kept tokens, its blocks on both, its output
    projection on the hidden ones, 3x. Once: the target's forward over the whole clip."""
    from benchshared.vit import ARCHES, patch_flops, vit_flops

    tokens = (args.frames // args.tubelet) * (args.image_size // args.patch) ** 2
    enc, pred = ARCHES[args.arch][0], ARCHES[args.predictor][0]
    patch = patch_flops(args.arch, 3 * args.tubelet * args.patch**2, tokens)
    total = vit_flops(args.arch, tokens) + patch
    for kept, hidden in sets:
        predictor = 2 * enc * pred * kept + vit_flops(args.predictor, kept + hidden)
        predictor += 2 * pred * enc * hidden
        total += 3 * vit_flops(args.arch, kept) + 2 * patch + 3 * predictor
    return total


def jepa_loss(
    target: nn.Module,
    encoder: nn.Module,
    predictor: nn.Module,
    clips: torch.Tensor,
    context: list,
    targets: list,
) -> torch.Tensor:
    """jepa's ``train_step`` forward: targets, context encoder and predictor per set,
    the mean absolute error averaged over the sets, its regulariser (weight 0)."""
    with torch.no_grad():
        h = target(clips)
        h = F.layer_norm(h, (h.size(-1),))
        h = [gather_tokens(h, t) for t in targets]
    z = [encoder(clips, keep=c) for c in context]
    z = [
        predictor(zi, c, t, i) for i, (zi, c, t) in enumerate(zip(z, context, targets, strict=True))
    ]
    loss = 0.0
    for zi, hi in zip(z, h, strict=True):
        loss = loss + torch.mean(torch.abs(zi - hi))
    loss = loss / len(targets)
    pstd = sum(torch.sqrt(zi.var(dim=1) + 0.0001) for zi in z) / len(z)
    return loss + 0.0 * torch.mean(F.relu(1.0 - pstd))


def param_groups(encoder: nn.Module, predictor: nn.Module, weight_decay: float) -> list[dict]:
    """jepa's ``init_opt``: weights with weight decay, biases and 1-D parameters without,
    encoder and predictor apart."""
    groups = []
    for decay in (True, False):
        for model in (encoder, predictor):
            ps = [p for n, p in model.named_parameters()
                  if ("bias" not in n and p.dim() != 1) == decay]  # fmt: skip
            groups.append({"params": ps, "weight_decay": weight_decay if decay else 0.0})
    return groups


def step_statistics(encoder: nn.Module, predictor: nn.Module, opt: torch.optim.Optimizer) -> None:
    """jepa's ``grad_logger`` (the norm of every weight's gradient) for both models and
    its ``adamw_logger`` (the mean absolute value of both AdamW moments of every
    parameter), each value read on the host, every step."""
    for model in (encoder, predictor):
        for name, p in model.named_parameters():
            if p.grad is not None and not (name.endswith(".bias") or p.dim() == 1):
                float(torch.norm(p.grad))
    for state in opt.state_dict()["state"].values():
        float(state["exp_avg"].abs().mean())
        float(state["exp_avg_sq"].abs().mean())


def all_reduce_mean(x: torch.Tensor) -> torch.Tensor:
    """jepa's ``AllReduce``: the mean over the ranks (itself alone)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        x = x.contiguous() / dist.get_world_size()
        dist.all_reduce(x)
    return x


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    run = setup(args, device=device, cudnn_benchmark=True)  # jepa's train.py turns it on
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    tokens = (args.frames // args.tubelet) * (args.image_size // args.patch) ** 2
    encoder, predictor = build(args, tokens)
    encoder, predictor = encoder.to(device), predictor.to(device)
    target = copy.deepcopy(encoder).requires_grad_(False)
    csv = Path(args.dataset or Path(data_dir("FakeVideo")) / "video_metainfo.csv")
    dataset = VideoClips(csv, args)
    collate = MaskCollator(args)
    sampler = None
    if world > 1:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(dataset, world, rank, seed=args.seed)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
        drop_last=True, num_workers=args.num_workers, persistent_workers=args.num_workers > 0,
        pin_memory=device.type == "cuda", collate_fn=collate,
        prefetch_factor=loader_prefetch(
            sampled_batch_bytes(dataset, args.batch_size), args.num_workers, label="vjepa"
        ),
    )  # fmt: skip
    if len(loader) == 0:
        raise SystemExit(
            f"vjepa: {len(dataset)} videos over {world} rank(s) hold no whole batch of "
            f"{args.batch_size} per rank: prepare more videos (--videos)"
        )
    if rank == 0:
        n = sum(p.numel() for p in encoder.parameters())
        print(
            f"vjepa: ViT-{args.arch}/{args.patch} ({n / 1e6:.1f}M parameters), {tokens} "
            f"tubelets per clip, {len(args.mask_blocks)} mask sets, batch {args.batch_size} x "
            f"{world}, {args.precision} on {device}, passes of {len(loader)} batches",
            flush=True,
        )

    def on_device(batch: tuple) -> tuple:
        clips, context, targets = batch
        return (
            clips.to(device, non_blocking=True),
            [c.to(device, non_blocking=True) for c in context],
            [t.to(device, non_blocking=True) for t in targets],
        )

    def loss_of(batch: tuple, enc: nn.Module, pred: nn.Module) -> torch.Tensor:
        with run.autocast():
            return jepa_loss(target, enc, pred, *batch)

    # Model FLOPs (without the recomputed forwards of checkpointing; hardware FLOPs
    # beside), counted on 2 random clips with masks drawn as the loader draws them.
    size = (3, args.frames, args.image_size, args.image_size)
    sample = on_device(MaskCollator(args)([torch.randn(size) for _ in range(2)]))

    def checkpointing(on: bool) -> None:
        encoder.checkpointing = on

    count_and_declare(
        lambda: loss_of(sample, encoder, predictor).backward(), 2, precision=args.precision,
        checkpointing=checkpointing if args.gradient_checkpointing else None,
    )  # fmt: skip
    encoder.zero_grad(set_to_none=True)
    predictor.zero_grad(set_to_none=True)
    enc: nn.Module = encoder
    pred: nn.Module = predictor
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ids = [device.index] if device.type == "cuda" else None
        enc = DistributedDataParallel(encoder, device_ids=ids, static_graph=True)
        pred = DistributedDataParallel(predictor, device_ids=ids, static_graph=True)
    opt = torch.optim.AdamW(param_groups(encoder, predictor, args.weight_decay), lr=args.lr)
    scaler = torch.amp.GradScaler(device.type, enabled=run.amp_dtype is not None)
    # The loader itself, one epoch per pass: each pass's first batch comes before the clock.
    timed = TimedIterator(loader, batch_size_fn=lambda b: len(b[0]), device=device)
    try:
        for batch in timed_passes(timed, sampler):
            batch = on_device(batch)
            loss = loss_of(batch, enc, pred)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
            step_statistics(encoder, predictor, opt)
            opt.zero_grad()
            with torch.no_grad():  # jepa's EMA, one parameter at a time
                for q, k in zip(encoder.parameters(), target.parameters(), strict=True):
                    k.mul_(args.momentum).add_((1.0 - args.momentum) * q.detach())
            clips = batch[0].flatten(1)
            float(all_reduce_mean(clips.var(dim=1).mean(dim=0)))
            float(all_reduce_mean(torch.min(clips.var(dim=1))))
            timed.record_loss(float(loss.detach()))
        if rank == 0:
            print(f"vjepa: {timed.epochs} pass(es) over the videos", flush=True)
    finally:
        enc = pred = opt = timed = None  # noqa: F841 - DDP's reducers go before the group
        teardown_distributed()


if __name__ == "__main__":
    run_and_exit(main)
