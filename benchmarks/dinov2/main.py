"""DINOv2 self-supervised training step on a ViT-g/14, in plain torch, as upstream
milabench runs DINOv2's ``train.py`` with ``vitg14.yaml``: student and EMA teacher,
multi-crop, DINO and iBOT heads with Sinkhorn-Knopp centring, KoLeo, FSDP in fp16.

The standard suite's dinov2-giant-single / -gpus / -nodes entries. facebookresearch's
dinov2 repository is not on the package registries; this is its training step
(``dinov2/train/ssl_meta_arch.py``, ``train.py``) on `benchshared.vit`:

* student: ViT-g/14 (embed 1536, 40 blocks in 4 chunks, 24 heads, SwiGLU 4096), layer
  scale 1e-5, stochastic depth 0.4 on every block done DINOv2's way (each residual
  branch computed for a random 60% of the crops, scaled back), a learned mask token;
  a DINO head (MLP 2048-2048-384, then 131,072 weight-normalised prototypes) and a
  separate iBOT head (2048-2048-256, 131,072 prototypes). The teacher has the same
  shape, runs in eval mode (no stochastic depth) and follows by EMA (0.994).
* data (`multicrop`, in the DataLoader workers): per image 2 global crops of 224 px and
  8 local crops of 98 px with DINOv2's colour, blur and solarisation augmentation,
  normalised, collated in fp16 with iBOT block masks on half of the global crops.
* step: the teacher's CLS tokens of the global crops through its DINO head and its
  masked patch tokens through its iBOT head, both centred by Sinkhorn-Knopp (3
  iterations, teacher temperature 0.04: the first value of DINOv2's schedule); the
  student on the masked global crops and the local crops together; the DINO loss
  (every local crop against both teacher crops, each global crop against the other),
  KoLeo (0.1) on the student's global CLS tokens, the iBOT loss on the masked patches;
  ShardedGradScaler, gradient norm clipped at 3.0 per student part, AdamW (DINOv2's
  parameter groups: no weight decay on biases, norms and layer scales, patch embedding
  at 0.2 x the learning rate), teacher EMA over the flat parameters; the teacher's
  gathered weights are freed after its forward (`reshard`), so that each step gathers
  the EMA's weights again.
* precision and parallelism: each part of student and teacher wrapped in FSDP (
  ``SHARD_GRAD_OP``, one unit per chunk of 10 blocks), parameters and gradient
  reductions in fp16 (the student heads reduce in fp32), buffers fp32, as
  ``compute_precision`` in DINOv2's default config; one process (-single) gets a
  process group of its own, as upstream's torchrun of one process does (FSDP then
  runs unsharded).

Throughput: global crops/s (2 per image), as upstream's observer counts
``collated_global_crops``. ``--arch tiny`` for CPUs.
"""

from __future__ import annotations

import argparse
import copy
import warnings

import torch
import torch.nn.functional as F
from multicrop import Collate, MultiCropFolder, SyntheticCrops, upperbound
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
from benchshared.datasets import data_dir
from benchshared.vision import epochs
from benchshared.vit import ARCHES, build_vit, ema_update, kept_samples

#: ``--precision`` -> the dtype of FSDP's parameters and reductions (None: fp32).
PARAM_DTYPES = {"fp16": torch.float16, "tf32-fp16": torch.float16, "bf16": torch.bfloat16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(ARCHES), default="giant")
    parser.add_argument("--patch", type=int, default=14)
    parser.add_argument("--batch-size", type=int, default=32, help="images per device")
    parser.add_argument("--global-size", type=int, default=224)
    parser.add_argument("--local-size", type=int, default=98)
    parser.add_argument("--local-crops", type=int, default=8)
    parser.add_argument("--prototypes", type=int, default=131072, help="DINO head")
    parser.add_argument("--bottleneck", type=int, default=384, help="DINO head")
    parser.add_argument("--ibot-prototypes", type=int, default=131072)
    parser.add_argument("--ibot-bottleneck", type=int, default=256)
    parser.add_argument("--head-hidden", type=int, default=2048, help="both heads")
    parser.add_argument("--drop-path", type=float, default=0.4, help="student, every block")
    parser.add_argument("--layer-scale", type=float, default=1e-5)
    parser.add_argument("--block-chunks", type=int, default=4, help="FSDP units")
    parser.add_argument("--mask-probability", type=float, default=0.5)
    parser.add_argument("--mask-ratio", type=float, nargs=2, default=[0.1, 0.5])
    parser.add_argument("--koleo", type=float, default=0.1, help="KoLeo loss weight")
    parser.add_argument("--teacher-temp", type=float, default=0.04)
    parser.add_argument("--clip-grad", type=float, default=3.0)
    parser.add_argument("--momentum", type=float, default=0.994, help="teacher EMA")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--weight-decay", type=float, default=0.04)
    parser.add_argument("--data", default=None, help="default: $MILABENCH_DIR_DATA/FakeImageNet")
    parser.add_argument("--synthetic-data", action="store_true")
    parser.add_argument("--num-workers", type=int, default=10)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--backend", default=None, help="collectives under torchrun")
    # prepare.py's options (the same argv reaches both scripts): accepted, unused here
    parser.add_argument("--classes", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--images-per-class", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source-size", type=int, default=None, help=argparse.SUPPRESS)
    add_common_arguments(
        parser, precisions=[*PRECISIONS, "tf32-fp16"], default_precision="tf32-fp16"
    )
    return parser.parse_args(argv)


class DinoHead(nn.Module):
    """DINOv2's ``DINOHead``: MLP to the bottleneck, L2-normalised, then the prototypes
    through a weight-normalised linear layer (its norms initialised at 1)."""

    def __init__(self, dim: int, hidden: int, bottleneck: int, prototypes: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, bottleneck),
        )  # fmt: skip
        last = nn.Linear(bottleneck, prototypes, bias=False)
        self.last_layer = torch.nn.utils.parametrizations.weight_norm(last)
        with torch.no_grad():
            self.last_layer.parametrizations.weight.original0.fill_(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mlp(x)
        eps = 1e-6 if x.dtype == torch.float16 else 1e-12
        return self.last_layer(F.normalize(x, dim=-1, p=2, eps=eps))


def build(args: argparse.Namespace, depth: int | None = None) -> nn.ModuleDict:
    """The student: backbone, DINO head, iBOT head (the teacher is its copy); with
    ``depth``, a backbone of that many blocks (`build_vit`)."""
    tokens = (args.global_size // args.patch) ** 2
    backbone = build_vit(
        args.arch, patch=args.patch, cls_token=True, max_tokens=tokens, mask_token=True,
        drop_path=args.drop_path, layer_scale=args.layer_scale, chunks=args.block_chunks,
        checkpointing=args.gradient_checkpointing, depth=depth,
    )  # fmt: skip
    dim, hidden = backbone.dim, args.head_hidden
    return nn.ModuleDict(
        {
            "backbone": backbone,
            "dino_head": DinoHead(dim, hidden, args.bottleneck, args.prototypes),
            "ibot_head": DinoHead(dim, hidden, args.ibot_bottleneck, args.ibot_prototypes),
        }
    )


def analytic_flops(args: argparse.Namespace) -> float:
    """Model FLOPs of one image's share of a training step of ``--batch-size`` images,
    from the shapes (no recomputation). Student: its blocks over the kept crops only
    (stochastic depth: `kept_samples` of the 2B global and the 8B local crops per
    residual branch), forward and backward (3x); the patch embedding of every crop, its
    forward and its weight gradient; the DINO head over the 10B CLS tokens and the iBOT
    head over the ``upperbound`` buffer, 3x. Teacher: blocks and patch embedding over
    the global crops, DINO head over their CLS tokens, iBOT head over the buffer, forward
    only. KoLeo: one ``B x B`` product of CLS tokens per global crop (no backward)."""
    from benchshared.vit import patch_flops, vit_flops

    b, dim, hh = args.batch_size, ARCHES[args.arch][0], args.head_hidden

    def head(bottleneck: int, prototypes: int) -> int:
        return 2 * (dim * hh + hh * hh + hh * bottleneck + bottleneck * prototypes)

    g_tokens = (args.global_size // args.patch) ** 2
    l_tokens = (args.local_size // args.patch) ** 2
    pixels = 3 * args.patch**2
    g, loc = 2 * b, args.local_crops * b
    kg, kl = kept_samples(g, args.drop_path), kept_samples(loc, args.drop_path)
    blocks = kg * vit_flops(args.arch, g_tokens + 1) + kl * vit_flops(args.arch, l_tokens + 1)
    patches = g * patch_flops(args.arch, pixels, g_tokens) + loc * patch_flops(
        args.arch, pixels, l_tokens
    )
    up = upperbound(g, g_tokens, args.mask_probability, tuple(args.mask_ratio))
    dino, ibot = (
        head(args.bottleneck, args.prototypes),
        head(args.ibot_bottleneck, args.ibot_prototypes),
    )
    student = 3 * blocks + 2 * patches + 3 * ((g + loc) * dino + up * ibot)
    teacher = g * vit_flops(args.arch, g_tokens + 1) + g * patch_flops(args.arch, pixels, g_tokens)
    teacher += g * dino + up * ibot
    koleo = 2 * (2 * b * b * dim)
    return (student + teacher + koleo) / b


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """In place over the job's ranks (a no-op without a process group)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(x)
    return x


@torch.no_grad()
def sinkhorn_knopp(
    logits: torch.Tensor, temp: float, samples: torch.Tensor | None = None, iterations: int = 3
) -> torch.Tensor:
    """DINOv2's ``sinkhorn_knopp_teacher``: soft assignments of the teacher's outputs to
    the prototypes, every prototype and every sample given equal total weight over all
    ranks. ``samples``: the assignment count (the iBOT loss passes its masked patches,
    summed over the ranks); default: rows x ranks."""
    import torch.distributed as dist

    q = torch.exp(logits.float() / temp).t()  # prototypes x samples
    world = dist.get_world_size() if dist.is_initialized() else 1
    b = q.shape[1] * world if samples is None else all_reduce(samples)
    k = q.shape[0]
    q /= all_reduce(torch.sum(q))
    for _ in range(iterations):
        q /= all_reduce(torch.sum(q, dim=1, keepdim=True))
        q /= k
        q /= torch.sum(q, dim=0, keepdim=True)
        q /= b
    q *= b
    return q.t()


def dino_cross_entropy(students: list, teachers: list, temp: float = 0.1) -> torch.Tensor:
    """DINOv2's ``DINOLoss.forward``: minus the mean of sum(teacher x log-softmax(student
    / 0.1)) over every (student, teacher) pair."""
    total = 0
    for s in students:
        lsm = F.log_softmax(s / temp, dim=-1)
        for t in teachers:
            total = total - torch.sum(t * lsm, dim=-1).mean()
    return total


def koleo(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """DINOv2's ``KoLeoLoss``: minus the mean log distance of each L2-normalised vector
    to its nearest neighbour in the batch."""
    x = F.normalize(x, eps=eps, p=2, dim=-1)
    dots = torch.mm(x, x.t())
    n = x.shape[0]
    dots.view(-1)[:: n + 1].fill_(-1)
    nearest = torch.max(dots, dim=1).indices
    return -torch.log(F.pairwise_distance(x, x[nearest], p=2, eps=1e-8) + eps).mean()


def ibot_loss(
    s: torch.Tensor, t: torch.Tensor, masks: torch.Tensor, weights: torch.Tensor, temp: float = 0.1
) -> torch.Tensor:
    """DINOv2's ``iBOTPatchLoss.forward_masked``: the cross-entropy of each masked patch,
    weighted by 1 / its crop's masked count, summed, over the crops."""
    loss = torch.sum(t.float() * F.log_softmax(s.float() / temp, dim=-1), dim=-1)
    return -(loss * weights).sum() / masks.shape[0]


def train_losses(
    student: nn.ModuleDict,
    teacher: nn.ModuleDict,
    batch: dict,
    args: argparse.Namespace,
    device: torch.device,
    dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    """The four loss terms of DINOv2's ``SSLMetaArch.forward_backward`` for one batch of
    `multicrop.Collate` (the crops cast to ``dtype``, the dtype of the computation)."""
    glob = batch["global"].to(device, dtype, non_blocking=True)
    local = batch["local"].to(device, dtype, non_blocking=True)
    masks = batch["masks"].to(device, non_blocking=True)
    index = batch["mask_index"].to(device, non_blocking=True)
    weights = batch["masks_weight"].to(device, non_blocking=True)
    n_masked = batch["n_masked"].to(device, non_blocking=True)
    upper, m, n_local = batch["upperbound"], index.shape[0], args.local_crops
    terms = 2 + 2 * n_local  # (global - 1) x global + local x global loss terms

    with torch.no_grad():
        out = teacher["backbone"](glob)
        cls = out[:, 0].chunk(2)
        cls = torch.cat((cls[1], cls[0]))  # each global crop against the other one
        patches = out[:, 1:]
        buffer = patches.new_zeros(upper, patches.shape[-1])
        torch.index_select(patches.flatten(0, 1), 0, index, out=buffer[:m])
        t_dino = sinkhorn_knopp(teacher["dino_head"](cls), args.teacher_temp)
        t_dino = t_dino.view(2, -1, t_dino.shape[-1])
        t_ibot = teacher["ibot_head"](buffer)[:m]
        t_ibot = sinkhorn_knopp(t_ibot, args.teacher_temp, samples=n_masked)
    for part in teacher.values():
        reshard(part)

    s_glob, s_local = student["backbone"]([glob, local], masks=[masks, None])
    s_cls = s_glob[:, 0]
    patches = s_glob[:, 1:]
    buffer = patches.new_zeros(upper, patches.shape[-1])
    buffer[:m].copy_(torch.index_select(patches.flatten(0, 1), 0, index))
    s_ibot = student["ibot_head"](buffer)[:m]
    heads = student["dino_head"](torch.cat([s_local[:, 0], s_cls]))
    s_local_out, s_glob_out = heads[: s_local.shape[0]], heads[s_local.shape[0] :]
    losses = {
        "dino_local": dino_cross_entropy(s_local_out.chunk(n_local), list(t_dino)) / terms,
        "dino_global": dino_cross_entropy([s_glob_out], [t_dino.flatten(0, 1)]) * 2 / terms,
        "koleo": args.koleo * sum(koleo(c) for c in s_cls.chunk(2)),
        "ibot": ibot_loss(s_ibot, t_ibot, masks, weights) * 2 * 0.5,
    }
    return losses


def param_groups(student: nn.ModuleDict, args: argparse.Namespace) -> list[dict]:
    """DINOv2's ``get_params_groups_with_decay`` + ``fuse_params_groups``: no weight
    decay on biases, norms and layer scales, the patch embedding at 0.2 x the learning
    rate, the prototypes apart (their own learning-rate schedule upstream); one group
    per combination, ``foreach``."""
    groups: dict[tuple, list] = {}
    for part in student.values():
        for name, p in part.named_parameters():
            if not p.requires_grad:
                continue
            name = name.replace("_fsdp_wrapped_module.", "")
            leaf = name.rsplit(".", 1)[-1]
            decay = not (name.endswith(".bias") or "norm" in name or leaf in ("ls1", "ls2"))
            lr = 0.2 if name.startswith("patch.") else 1.0
            groups.setdefault((lr, decay, "last_layer" in name), []).append(p)
    return [
        {"params": ps, "lr": args.lr * lr, "weight_decay": args.weight_decay if decay else 0.0,
         "foreach": True}
        for (lr, decay, _last), ps in groups.items()
    ]  # fmt: skip


def shard(module: nn.Module, args: argparse.Namespace, device: torch.device, reduce_fp32: bool):
    """DINOv2's ``get_fsdp_wrapper``: FSDP with ``SHARD_GRAD_OP``, a unit per block
    chunk, parameters (and reductions, unless ``reduce_fp32``) in the precision's dtype,
    buffers in fp32."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    dtype = PARAM_DTYPES.get(args.precision)
    precision = None
    if dtype is not None:
        reduce = torch.float32 if reduce_fp32 else dtype
        precision = MixedPrecision(
            param_dtype=dtype, reduce_dtype=reduce, buffer_dtype=torch.float32
        )
    blocks = getattr(module, "blocks", None)
    units = {type(blocks[0])} if blocks is not None else set()
    if device.type != "cpu" and device.index is None:  # one GPU per process (-single)
        device = torch.device(device.type, getattr(torch, device.type).current_device())
    with warnings.catch_warnings():
        # the chunks are module lists with a forward (DINOv2's BlockChunk: FSDP warns of
        # any list); one process: FSDP says it runs unsharded, as upstream's does
        warnings.filterwarnings("ignore", message="FSDP will not all-gather")
        warnings.filterwarnings("ignore", message="FSDP is switching to use `NO_SHARD`")
        return FSDP(
            module, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP, mixed_precision=precision,
            device_id=device, sync_module_states=device.type != "cpu", use_orig_params=True,
            auto_wrap_policy=ModuleWrapPolicy(units),
        )  # fmt: skip


def reshard(part: nn.Module) -> None:
    """Free the gathered weights of ``part``'s sharded FSDP units, as DINOv2's
    ``reshard_fsdp_model`` does after the teacher's forward. The teacher never runs a
    backward, and ``SHARD_GRAD_OP`` frees gathered weights only there: without this, its
    next forward skips the all-gather and keeps the first step's weights, so the EMA never
    reaches it and the gather's traffic is never paid (several ranks; one rank runs
    ``NO_SHARD``, where there is nothing to free). FSDP's handle is private API: a torch
    without it stops the run with the reason, rather than measuring other work."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy

    for unit in FSDP.fsdp_modules(part):
        if unit.sharding_strategy is ShardingStrategy.NO_SHARD or not unit._has_params:
            continue
        handle = getattr(unit, "_handle", None)
        if handle is None or not hasattr(handle, "reshard"):
            raise RuntimeError(
                f"torch {torch.__version__}: FSDP units have no `_handle.reshard`; the "
                "teacher's gathered weights cannot be freed after its forward"
            )
        handle.reshard(True)


def flat_params(part: nn.Module) -> list[torch.Tensor]:
    """The flat parameters of ``part``'s FSDP units (what DINOv2's teacher EMA updates)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return [m._flat_param for m in FSDP.fsdp_modules(part) if m._flat_param is not None]


def join_group(args: argparse.Namespace, device: torch.device) -> None:
    """A process group of one for a run outside torchrun (FSDP needs one)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend = args.backend or ("nccl" if device.type == "cuda" else "gloo")
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def crop_batches(args: argparse.Namespace, rank: int, world: int, device: torch.device):
    """Batches of `multicrop.Collate` from this rank's share of the JPEG folder (or
    synthetic crops), augmented in ``--num-workers`` DataLoader workers."""
    if args.synthetic_data:
        dataset = SyntheticCrops(args)
    else:
        dataset = MultiCropFolder(args.data or data_dir("FakeImageNet"), args)
    sampler = None
    if world > 1:
        from torch.utils.data.distributed import DistributedSampler

        sampler = DistributedSampler(dataset, world, rank, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
        drop_last=True, num_workers=args.num_workers, collate_fn=Collate(args),
        persistent_workers=args.num_workers > 0, pin_memory=device.type == "cuda",
        prefetch_factor=loader_prefetch(
            sampled_batch_bytes(dataset, args.batch_size), args.num_workers, label="dinov2"
        ),
    )  # fmt: skip
    return epochs(loader, 100_000)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    setup(args, device=device)
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    join_group(args, device)
    dtype = PARAM_DTYPES.get(args.precision, torch.float32)
    student = build(args).to(device)
    teacher = copy.deepcopy(student).requires_grad_(False).eval()
    student.train()
    batches = crop_batches(args, rank, world, device)
    if rank == 0:
        n = sum(p.numel() for p in student["backbone"].parameters())
        print(
            f"dinov2: ViT-{args.arch}/{args.patch} ({n / 1e6:.1f}M parameters), batch "
            f"{args.batch_size} x {world}, 2 x {args.global_size} + {args.local_crops} x "
            f"{args.local_size} px crops, FSDP {args.precision} on {device}",
            flush=True,
        )

    # Model FLOPs (without the recomputed forwards of checkpointing; hardware FLOPs
    # beside), counted on 2 images before FSDP wraps the model, in fp32.
    sample = Collate(args)([SyntheticCrops(args)[i] for i in range(2)])

    def count_step() -> None:
        losses = train_losses(student, teacher, sample, args, device, torch.float32)
        sum(losses.values()).backward()

    def checkpointing(on: bool) -> None:
        student["backbone"].checkpointing = on

    count_and_declare(
        count_step, 2 * 2, precision=args.precision,
        checkpointing=checkpointing if args.gradient_checkpointing else None,
    )  # fmt: skip
    student.zero_grad(set_to_none=True)
    for name in student:
        student[name] = shard(student[name], args, device, reduce_fp32=name != "backbone")
        teacher[name] = shard(teacher[name], args, device, reduce_fp32=False)
    ema_student = [p for name in student for p in flat_params(student[name])]
    ema_teacher = [p for name in teacher for p in flat_params(teacher[name])]
    opt = torch.optim.AdamW(param_groups(student, args), betas=(0.9, 0.999))
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    scaler = ShardedGradScaler(device.type, enabled=dtype is torch.float16)
    timed = TimedIterator(batches, batch_size_fn=lambda b: len(b["global"]), device=device)
    try:
        for batch in timed:
            opt.zero_grad(set_to_none=True)
            losses = train_losses(student, teacher, batch, args, device, dtype)
            loss = sum(losses.values())
            scaler.scale(loss).backward()
            if args.clip_grad:
                scaler.unscale_(opt)
                for part in student.values():
                    part.clip_grad_norm_(args.clip_grad)
            scaler.step(opt)
            scaler.update()
            ema_update(ema_teacher, ema_student, args.momentum)
            # DINOv2's logging: every term reduced over the ranks and read on the host
            values = [v.detach().clone() for v in losses.values()]
            reduced = [(all_reduce(v) if world > 1 else v).item() / world for v in values]
            timed.record_loss(sum(reduced))
    finally:
        student = teacher = opt = timed = None  # noqa: F841 - FSDP's state before its group
        teardown_distributed()


if __name__ == "__main__":
    run_and_exit(main)
