"""Memory of the recursiongfn entry per GPU and per node (`benchkit.memory`). The
trajectories a step samples (their graphs and lengths) are data, which tensors without
data cannot tell: the networks are small, so they are built on the CPU and one real step
(sampling ``SMALL`` trajectories with the policy, the proxy's scores, the trajectory-
balance forward and backward over every state graph) is measured, its activations scaled
to the configured batch (each trajectory's graphs are its own). Trained: the policy with
its log Z head (Adam's two states per weight); frozen: the sampling model (the policy's
EMA copy) and the SEH proxy. The sampling workers hold no GPU memory (their network
calls run in the training process).
"""

from __future__ import annotations

import argparse
import copy

from benchkit.memory import Footprint, Workload, estimate, sibling_main

SMALL = 16  # trajectories in the measured step


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options), one process per GPU."""
    import torch

    bench = sibling_main(__file__)
    from proxy import load_proxy

    small = min(SMALL, args.batch_size)

    def make() -> Workload:
        env = bench.make_env(args)
        model = bench.make_policy(args, env)
        sampler_model = copy.deepcopy(model).requires_grad_(False)
        proxy = load_proxy(None)
        run = bench.setup(argparse.Namespace(precision="fp32", device="cpu", threads=None))
        calls = bench.handlers(sampler_model, proxy, run)
        small_args = argparse.Namespace(**{**vars(args), "batch_size": small})
        sampler = bench.make_sampler(small_args, log=False)

        def step() -> None:
            arrays = sampler.sample(lambda name, a: calls[name](a))
            batch = {k: torch.as_tensor(v) for k, v in arrays.items()}
            bench.trajectory_balance(model, batch, run)[0].backward()

        return Workload([model], step, frozen=[sampler_model, proxy])

    with torch.random.fork_rng():
        torch.manual_seed(0)
        return estimate(
            make,
            precision=args.precision,
            optimizer="adam-foreach",
            ranks_per_node=ranks_per_node,
            measured_at=(args.batch_size, small),
        )
