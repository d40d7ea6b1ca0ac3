"""Train a GFlowNet that builds graphs, with the trajectory-balance objective.

An equivalent, in plain torch + torch_geometric, of upstream's ``recursiongfn`` workload
(recursionpharma's gflownet: fragment-based molecule generation, a graph transformer of
width 128 and 4 layers, 128 trajectories per step, trajectory balance with a learned
conditional log Z, a fixed proxy model as the reward, temperature 64). The gflownet
package is not on the package registries, and its reward proxy is a download; the
environment (`env.py`), the networks (`model.py`) and the loss are written here with the
same computational shape. It is not upstream's workload (no RDKit chemistry, a random
proxy, sampling in the training process): the standard suite keeps it unweighted
(docs/parity.md). One training step:

1. sample ``--batch-size`` trajectories (no gradient) with the *sampling model*, an
   exponential moving average of the policy (upstream's ``algo.sampling_tau`` 0.9): a
   forward over the batch of unfinished graphs per action, until every one has stopped;
2. score the final graphs with the proxy: ``log R = beta * log(proxy)``;
3. recompute the forward log-probabilities of every transition in one batched forward
   pass (with gradient), sum them per trajectory and minimise
   ``(log Z + sum log P_F - log R - sum log P_B)^2``, Adam, gradient norm clipped; then
   move the sampling model towards the policy.

Throughput is graph nodes per second, counted as upstream counts them: the nodes of every
state graph the step trains on (one per transition; the empty graph counts one node, as
gflownet represents it). Runs by hand too: ``python main.py --batch-size 16
--layer-width 32 --num-layers 2``.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from env import GraphBuildingEnv, States
from model import GraphTransformerPolicy, LogZ, Proxy, thermometer

from benchkit.exiting import run_and_exit
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import Setup, add_common_arguments, setup


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128, help="trajectories per step")
    parser.add_argument("--layer-width", type=int, default=128)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--max-nodes", type=int, default=9, help="nodes (fragments) per graph")
    parser.add_argument("--num-types", type=int, default=72, help="node (fragment) types")
    parser.add_argument("--max-steps", type=int, default=16, help="actions before forced stop")
    parser.add_argument("--beta", type=float, default=64.0, help="reward temperature")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--lr-logz", type=float, default=1e-3)
    parser.add_argument("--clip-grad", type=float, default=10.0, help="total gradient norm")
    parser.add_argument(
        "--sampling-tau", type=float, default=0.9, help="EMA of the sampling model (0: none)"
    )
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.layer_width % args.heads:
        parser.error("--layer-width must be a multiple of --heads")
    return args


@dataclass
class Trajectories:
    """Every transition of a batch of trajectories, flattened: the state it left, the
    action taken, its trajectory, and log P_B of the way back."""

    states: States
    actions: torch.Tensor
    owner: torch.Tensor
    log_pb: torch.Tensor
    final: States

    def node_count(self) -> torch.Tensor:
        """Nodes of every state graph (the empty graph counts one): upstream's item. A
        device scalar: the timer reads it later, without a synchronisation here."""
        return self.states.n.clamp_min(1).sum()


def sample(
    env: GraphBuildingEnv, policy: GraphTransformerPolicy, cond: torch.Tensor, batch: int
) -> Trajectories:
    """Roll ``batch`` trajectories out with the current policy (Gumbel-max sampling)."""
    states = env.empty(batch)
    final = env.empty(batch)
    alive = torch.arange(batch, device=env.device)
    parts: list[tuple[States, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    with torch.no_grad():
        while alive.numel():
            logits = policy(states, cond[alive])
            gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_min(1e-20)))
            actions = (logits + gumbel).argmax(1)
            nxt, stopped = env.step(states, actions)
            parts.append((states, actions, alive, env.log_backward(nxt, stopped)))
            final.types[alive[stopped]] = nxt.types[stopped]
            final.adj[alive[stopped]] = nxt.adj[stopped]
            final.n[alive[stopped]] = nxt.n[stopped]
            going = ~stopped
            states, alive = nxt[going], alive[going]
    return Trajectories(
        States.cat([p[0] for p in parts]),
        torch.cat([p[1] for p in parts]),
        torch.cat([p[2] for p in parts]),
        torch.cat([p[3] for p in parts]),
        final,
    )


def trajectory_balance(
    policy: GraphTransformerPolicy,
    logz: LogZ,
    proxy: Proxy,
    traj: Trajectories,
    cond: torch.Tensor,
    beta: float,
    run: Setup,
) -> torch.Tensor:
    """Mean squared trajectory-balance residual of the batch: the forward log-probabilities
    are recomputed with gradient in one batched pass over every transition."""
    batch = cond.size(0)
    with torch.no_grad():
        log_reward = beta * torch.log(proxy(traj.final).clamp_min(1e-30))
    with run.autocast():
        logits = policy(traj.states, cond[traj.owner])
    log_pf = torch.log_softmax(logits, dim=1).gather(1, traj.actions.unsqueeze(1)).squeeze(1)
    sum_pf = torch.zeros(batch, device=cond.device).index_add(0, traj.owner, log_pf)
    sum_pb = torch.zeros(batch, device=cond.device).index_add(0, traj.owner, traj.log_pb)
    residual = logz(cond) + sum_pf - log_reward - sum_pb
    return residual.pow(2).mean()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args)
    device = run.device
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    env = GraphBuildingEnv(args.max_nodes, args.num_types, max_steps=args.max_steps, device=device)
    policy = GraphTransformerPolicy(env, args.layer_width, args.num_layers, args.heads).to(device)
    logz = LogZ(args.layer_width).to(device)
    proxy = Proxy(args.num_types).to(device).eval()
    opt = torch.optim.Adam(
        [
            {"params": policy.parameters(), "lr": args.lr},
            {"params": logz.parameters(), "lr": args.lr_logz},
        ]
    )
    scaler = run.grad_scaler()
    beta = torch.full((args.batch_size,), args.beta, device=device)
    cond = thermometer(beta)
    params = list(policy.parameters()) + list(logz.parameters())

    # The sampling model: a copy of the policy that follows it by an exponential moving
    # average after every update (tau 0 samples with the policy itself).
    sampler = copy.deepcopy(policy).requires_grad_(False) if args.sampling_tau else policy
    policy_params, sampler_params = list(policy.parameters()), list(sampler.parameters())

    def batches() -> Iterator[Trajectories]:
        """Trajectories sampled for the next step (inside the timed interval, as
        upstream's loader hands its sampled batches to the step)."""
        while True:
            yield sample(env, sampler, cond, args.batch_size)

    def loss_of(traj: Trajectories) -> torch.Tensor:
        return trajectory_balance(policy, logz, proxy, traj, cond, args.beta, run)

    # Sampling + proxy + the batched forward/backward, counted once: matmuls (attention
    # projections, feed-forward layers, heads) only, not the graph gathers and scatters,
    # so it is a lower bound; trajectory lengths vary from step to step.
    counted: dict[str, Trajectories] = {}

    def counted_step() -> None:
        counted["traj"] = sample(env, sampler, cond, args.batch_size)
        loss_of(counted["traj"]).backward()

    from benchkit.flops import count_flops, declare_flops

    total = count_flops(counted_step)
    nodes = int(counted["traj"].node_count())
    declare_flops(total / nodes, precision=args.precision, source="counted")
    opt.zero_grad(set_to_none=True)
    n_params = sum(p.numel() for p in policy.parameters())
    print(
        f"recursiongfn: graph transformer width {args.layer_width}, {args.num_layers} layers "
        f"({n_params / 1e6:.2f}M parameters), {args.batch_size} trajectories per step "
        f"({nodes} state-graph nodes in the counted one), at most {args.max_nodes} nodes of "
        f"{args.num_types} types, sampling tau {args.sampling_tau}, {args.precision} on "
        f"{device}, {torch.get_num_threads()} threads, {total / nodes / 1e6:.2f} counted "
        "MFLOP per node",
        flush=True,
    )

    timed = TimedIterator(
        batches(), batch_size_fn=lambda traj: traj.node_count(), device=device, units="nodes/s"
    )
    for traj in timed:
        loss = loss_of(traj)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, args.clip_grad)
        scaler.step(opt)
        scaler.update()
        if sampler is not policy:
            with torch.no_grad():
                torch._foreach_lerp_(sampler_params, policy_params, 1.0 - args.sampling_tau)
        timed.record_loss(loss)


if __name__ == "__main__":
    run_and_exit(main)
