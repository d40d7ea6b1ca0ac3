"""Memory of a flops entry per GPU and per node (`benchkit.memory`): its three square
matrices (two operands, made in fp32 then cast, and the output), measured on the meta
device at the size the run uses on a GPU (8192 unless ``--size``)."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options), one process per GPU."""
    import torch

    bench = sibling_main(__file__)
    on_cpu = (args.device or "cuda") == "cpu"
    size = args.size or (1024 if on_cpu else 8192)
    dtype = bench.DTYPES[args.dtype]

    def make() -> Workload:
        def step() -> None:
            a = torch.zeros(size, size).to(dtype)
            b = torch.zeros(size, size).to(dtype)
            out = torch.empty(size, size, dtype=dtype)
            torch.matmul(a, b, out=out)

        return Workload([], step)

    return estimate(make, optimizer="none", ranks_per_node=ranks_per_node, built_on="device")
