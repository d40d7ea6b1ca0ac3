"""Memory of a DINOv2 entry per GPU and per node (`benchkit.memory`): the student
(ViT, DINO and iBOT heads, trained with AdamW) and its EMA teacher (frozen) built on the
meta device in the dtype FSDP computes in (fp16), and one step over the configured batch
measured there (teacher on the global crops, student on all the crops with its
stochastic depth, the heads, the losses, the backward). Activation checkpointing of the
student's blocks is taken into account when it is on.

Then FSDP's share, as DINOv2 runs it (``SHARD_GRAD_OP`` with fp16 mixed precision, each
part of student and teacher wrapped apart, a unit per chunk of blocks): every rank
keeps its 1/world shard of the fp32 weights, gradients and AdamW state (student) and of
the teacher's fp32 weights; the fp16 copies of every unit stay gathered from the
forward to the end of the backward (``SHARD_GRAD_OP`` does not free them after the
forward; the teacher's are not freed either: upstream's milabench turns DINOv2's
``reshard_fsdp_model`` into a no-op); the fp16 gradients of the largest unit wait for
their reduce-scatter. One rank (-single) runs the same with nothing sharded."""

from __future__ import annotations

import argparse
import copy
import math
from typing import Any

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def workload(args: argparse.Namespace, depth: int | None = None, batch: Any = None) -> Workload:
    """The student (trained), the teacher (frozen) and one step of ``--batch-size``
    images, on the meta device, in the computation's dtype; with ``depth``, both with
    that many blocks, over ``batch`` (the shallow copies of `benchkit.memory.by_depth`
    see the masks the whole model sees: the iBOT head's work depends on their count)."""
    import torch

    from benchshared.vit import ARCHES

    bench = sibling_main(__file__)
    dtype = bench.PARAM_DTYPES.get(args.precision, torch.float32)
    with torch.device("meta"):
        student = bench.build(args, depth).to(dtype)
        teacher = copy.deepcopy(student).requires_grad_(False).eval()
    student.train()
    # the batch is made here, real (its masks are drawn from real crops), small beside
    # the step: fp16 crops of ``--batch-size`` images
    g, loc = args.global_size, args.local_size
    crops = [(torch.zeros(2, 3, g, g), torch.zeros(args.local_crops, 3, loc, loc))]
    if batch is None:
        batch = bench.Collate(args)(crops * args.batch_size)

    def step() -> None:
        losses = bench.train_losses(student, teacher, batch, args, torch.device("cpu"), dtype)
        sum(losses.values()).backward()

    if depth is not None:
        return Workload([student], step, frozen=[teacher], depth=depth)
    full = ARCHES[args.arch][1]
    return Workload(
        [student], step, frozen=[teacher], depth=full, at_depth=lambda n: workload(args, n, batch)
    )


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options) on ``world`` ranks, ``ranks_per_node``
    processes per node (module docstring)."""
    made: dict = {}

    def make() -> Workload:
        made["work"] = workload(args)
        return made["work"]

    measured = estimate(make, precision=None, world=1, ranks_per_node=ranks_per_node)
    work = made.get("work")
    if work is None:  # measured once for another world size of the same entry
        work = workload(args)
    student, teacher = work.trained[0], work.frozen[0]
    n_student = sum(p.numel() for p in student.parameters())
    n_teacher = sum(p.numel() for p in teacher.parameters())
    low = next(student.parameters()).element_size()  # the dtype FSDP computes in
    units = [sum(p.numel() for p in chunk.parameters()) for chunk in student["backbone"].blocks]
    units += [sum(p.numel() for p in student[k].parameters()) for k in ("dino_head", "ibot_head")]

    def shard(n: int) -> int:
        return math.ceil(n / world)

    gathered = low * (n_student + n_teacher) if low < 4 else 0
    return Footprint(
        params=4 * shard(n_student) + (low * n_student if low < 4 else 0),
        grads=4 * shard(n_student),
        optimizer=2 * 4 * shard(n_student),
        activations=measured.activations,
        other=4 * shard(n_teacher) + (low * n_teacher if low < 4 else 0) + low * max(units),
        host_startup=4 * n_student,  # built on the host, then moved; the teacher is copied there
        ranks_per_node=ranks_per_node,
        world=world,
        notes=(f"FSDP SHARD_GRAD_OP over {world} rank(s); fp16 copies gathered: {gathered} bytes",),
    )
