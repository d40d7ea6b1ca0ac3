"""Memory of the recursiongfn entry per GPU and per node (`benchkit.memory`). The
trajectories a step samples (their graphs and lengths) are data, which tensors without
data cannot tell: the networks are small, so they are built on the CPU and one real step
(sampling, the proxy, the batched forward and backward) over ``SMALL`` trajectories is
measured, its activations scaled to the configured batch (each trajectory's graphs are
its own: the step's memory grows with their number). Adam's two states per weight of
the policy and log Z."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main

SMALL = 32  # trajectories in the measured step


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options), one process per GPU."""
    import torch

    bench = sibling_main(__file__)
    from env import GraphBuildingEnv
    from model import GraphTransformerPolicy, LogZ, Proxy, thermometer

    small = min(SMALL, args.batch_size)

    def make() -> Workload:
        cpu = torch.device("cpu")
        env = GraphBuildingEnv(args.max_nodes, args.num_types, max_steps=args.max_steps, device=cpu)
        policy = GraphTransformerPolicy(env, args.layer_width, args.num_layers, args.heads)
        logz = LogZ(args.layer_width)
        proxy = Proxy(args.num_types).eval()
        cond = thermometer(torch.full((small,), args.beta))
        run = bench.setup(argparse.Namespace(precision="fp32", device="cpu", threads=None))

        def step() -> None:
            traj = bench.sample(env, policy, cond, small)
            bench.trajectory_balance(policy, logz, proxy, traj, cond, args.beta, run).backward()

        return Workload([policy, logz], step, frozen=[proxy])

    with torch.random.fork_rng():
        return estimate(
            make,
            precision=args.precision,
            optimizer="adam-foreach",
            ranks_per_node=ranks_per_node,
            measured_at=(args.batch_size, small),
        )
