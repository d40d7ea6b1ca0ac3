"""Train gflownet's SEH fragment GFlowNet with trajectory balance (upstream's recursiongfn).

Upstream runs recursionpharma's gflownet (``SEHFragTrainer``); it is not on the package
registries, so its work is written here: the fragment environment (`env.py`, 72
fragments, at most 9, RDKit molecules), the graph-transformer policy (`model.py`), the
pretrained SEH proxy as reward (`proxy.py`, the ``bengio2021flow-proxy`` input; random
weights, announced, when it is not prepared) and the sampling workers (`sampling.py`).
Upstream's configuration: 128 trajectories from the policy per step, sampled by an EMA
copy of the model (tau 0.9) in ``--num-workers`` (8) processes; temperature beta 64,
constant (the conditioning encoding is then all zeros, as gflownet's); log R = beta
log(clip(proxy / 8, 1e-4, 100)), invalid molecules -75; loss: the mean over
trajectories of ``(log Z(cond) + sum log P_F - max(log R, -75) - sum log P_B)^2``,
P_B uniform; Adam (beta1 0.9, eps 1e-8, weight decay 1e-8), lr 1e-4 halving every
20000 steps, log Z's own Adam at 1e-3 halving every 50000; total gradient norm clipped at
10; the workers log every molecule to SQLite and both models are saved every 5 steps, as
upstream's run does (``--log-dir``, a temporary folder by default). Throughput: the
nodes of every state graph of a batch (upstream's count).
"""

from __future__ import annotations

import argparse
import copy
import functools
import multiprocessing
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from batching import GraphBatch, flat, log_softmax
from env import FragEnv
from model import GraphTransformerGFN
from proxy import FILE, INPUT, load_proxy
from sampling import Batches, BatchSampler, ModelServer

from benchkit.exiting import run_and_exit
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import Setup, add_common_arguments, setup

COND_DIM = 32  # gflownet's num_thermometer_dim
STAND_IN = "the SEH proxy network with random weights (benchmarks/recursiongfn/proxy.py)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128, help="trajectories per step")
    parser.add_argument("--layer-width", type=int, default=128, help="gflownet's num_emb")
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--num-workers", type=int, default=8, help="sampling processes (0: here)")
    parser.add_argument("--max-frags", type=int, default=9)
    parser.add_argument("--beta", type=float, default=64.0, help="reward temperature")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--lr-logz", type=float, default=1e-3)
    parser.add_argument("--lr-decay", type=float, default=20_000)
    parser.add_argument("--logz-lr-decay", type=float, default=50_000)
    parser.add_argument("--clip-grad", type=float, default=10.0, help="total gradient norm")
    parser.add_argument("--sampling-tau", type=float, default=0.9, help="EMA (0: none)")
    parser.add_argument(
        "--proxy", type=Path, default=None, help="weights file (default: the input)"
    )
    parser.add_argument(
        "--log-dir", type=Path, default=None, help="molecule logs, checkpoints (default: a temp)"
    )
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps (0: never)")
    add_common_arguments(parser)
    return parser.parse_args(argv)


def make_env(args: argparse.Namespace) -> FragEnv:
    return FragEnv(max_frags=args.max_frags)


def make_policy(args: argparse.Namespace, env: FragEnv) -> GraphTransformerGFN:
    return GraphTransformerGFN(
        env.num_node_dim,
        env.num_edge_dim,
        COND_DIM,
        env.num_types,
        env.num_edge_logits,
        num_emb=args.layer_width,
        num_layers=args.num_layers,
        num_heads=args.heads,
    )


def make_sampler(args: argparse.Namespace, log: bool = True) -> BatchSampler:
    """The batch sampler (picklable through `functools.partial`); it logs the molecules
    under ``<log-dir>/train`` (gflownet's ``SQLiteLogHook``) when ``log``."""
    log_dir = str(args.log_dir / "train") if log and args.log_dir else None
    cond = np.zeros(COND_DIM)  # a constant temperature's encoding (gflownet's)
    return BatchSampler(make_env(args), args.batch_size, cond, args.beta, log_dir=log_dir)


def handlers(sampler_model: torch.nn.Module, proxy: torch.nn.Module, run: Setup) -> dict[str, Any]:
    """The network calls the sampling makes: the policy's logits, the proxy's scores."""
    device = run.device

    def policy(arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        batch = GraphBatch.of(arrays, device)
        cond = torch.as_tensor(arrays["cond"]).to(device)
        with torch.no_grad(), run.autocast():
            logits, _ = sampler_model(batch, cond)
        return [x.float().cpu().numpy() for x in logits]

    def score(arrays: dict[str, np.ndarray]) -> np.ndarray:
        t = {k: torch.as_tensor(v).to(device) for k, v in arrays.items()}
        with torch.no_grad():
            pred = proxy(
                t["x"], t["edge_index"], t["edge_attr"], t["batch"], int(arrays["batch"][-1]) + 1
            )
        return pred.float().cpu().numpy()

    return {"policy": policy, "proxy": score}


def trajectory_balance(
    model: GraphTransformerGFN, batch: dict[str, torch.Tensor], run: Setup, illegal: float = -75.0
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """gflownet's TB loss of one training batch (`sampling.BatchSampler.sample`'s) and a
    few of the figures its ``compute_batch_losses`` reports (device scalars)."""
    device = run.device
    g = GraphBatch.of(batch, device)
    lens = batch["traj_lens"].to(device)
    trajs = lens.shape[0]
    owner = torch.arange(trajs, device=device).repeat_interleave(lens)
    cond = batch["cond"].to(device)
    with run.autocast():
        logits, _ = model(g, cond[owner])
        log_z = model.logZ(cond)[:, 0].float()
    log_p = log_softmax(flat(logits).float(), g.owners(), g.num_graphs)
    log_pf = log_p[batch["actions"].to(device)]
    sum_pf = torch.zeros(trajs, device=device).index_add(0, owner, log_pf)
    sum_pb = torch.zeros(trajs, device=device).index_add(0, owner, batch["log_pb"].to(device))
    clip_log_r = batch["log_rewards"].to(device).clamp_min(illegal)
    losses = ((log_z + sum_pf) - (clip_log_r + sum_pb)).pow(2)
    invalid = 1 - batch["is_valid"].to(device)
    info = {
        "loss": losses.mean().detach(),
        "logZ": log_z.mean().detach(),
        "invalid_trajectories": invalid.mean(),
        "invalid_logprob": (invalid * sum_pf).sum().detach() / (invalid.sum() + 1e-4),
    }
    return losses.mean(), info


def proxy_path(args: argparse.Namespace) -> tuple[Path | None, Any]:
    """The proxy's weights file and its input folder (None, None: the stand-in)."""
    if args.proxy is not None:
        return args.proxy, None
    from benchshared.inputs import locate

    folder = locate(INPUT)
    return (folder / FILE if folder is not None else None), folder


def entry_name() -> str:
    from benchshared.datasets import entry_config

    return str(entry_config().get("name") or "recursiongfn")


def loader(args: argparse.Namespace, calls: dict[str, Any]) -> tuple[Any, ModelServer | None]:
    """The training batches: a DataLoader over ``--num-workers`` sampling processes that
    reach the networks through a `ModelServer`, or the sampling itself in this process."""
    make = functools.partial(make_sampler, args)
    if args.num_workers == 0:
        return iter(Batches(make, lambda name, arrays: calls[name](arrays), args.seed)), None
    ctx = multiprocessing.get_context("fork")
    server = ModelServer(calls, args.num_workers, ctx).start()
    data = torch.utils.data.DataLoader(
        Batches(make, server.call, args.seed),
        batch_size=None,
        num_workers=args.num_workers,
        persistent_workers=True,
        prefetch_factor=1,
        multiprocessing_context=ctx,
    )
    return data, server


class Trainer:
    """gflownet's ``StandardOnlineTrainer`` step: two Adams (log Z apart, its own rate),
    their halving schedules, the total norm clipped over every parameter, the EMA of the
    sampling model, the per-step figures read on the host (``train_batch``'s info), the
    checkpoint of both models every ``--checkpoint-every`` steps (``_save_state``)."""

    def __init__(self, args: argparse.Namespace, model: GraphTransformerGFN, run: Setup) -> None:
        self.args, self.model, self.run = args, model, run
        z_ids = {id(p) for p in model.logZ.parameters()}
        others = [p for p in model.parameters() if id(p) not in z_ids]
        adam = dict(betas=(0.9, 0.999), weight_decay=1e-8, eps=1e-8)
        self.opt = torch.optim.Adam(others, args.lr, **adam)
        self.opt_z = torch.optim.Adam(list(model.logZ.parameters()), args.lr_logz, **adam)
        self.scheds = [
            torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: 2 ** (-s / args.lr_decay)),
            torch.optim.lr_scheduler.LambdaLR(self.opt_z, lambda s: 2 ** (-s / args.logz_lr_decay)),
        ]
        self.scaler = run.grad_scaler()
        self.sampler = copy.deepcopy(model).requires_grad_(False) if args.sampling_tau else model
        self.steps = 0

    def step(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        loss, info = trajectory_balance(self.model, batch, self.run)
        for opt in (self.opt, self.opt_z):
            opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        for opt in (self.opt, self.opt_z):
            self.scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(list(self.model.parameters()), self.args.clip_grad)
        for opt in (self.opt, self.opt_z):
            self.scaler.step(opt)
        self.scaler.update()
        for sched in self.scheds:
            sched.step()
        if self.sampler is not self.model:
            with torch.no_grad():
                theirs, ours = list(self.sampler.parameters()), list(self.model.parameters())
                torch._foreach_lerp_(theirs, ours, 1.0 - self.args.sampling_tau)
        self.steps += 1
        every = self.args.checkpoint_every
        if every and self.args.log_dir is not None and self.steps % every == 0:
            self.save()
        return loss, {k: float(v) for k, v in info.items()}

    def save(self) -> None:
        state = {"models_state_dict": [self.model.state_dict()], "step": self.steps}
        if self.sampler is not self.model:
            state["sampling_model_state_dict"] = [self.sampler.state_dict()]
        torch.save(state, self.args.log_dir / "model_state.pt")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args)
    device = run.device
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    model = make_policy(args, make_env(args)).to(device)
    path, folder = proxy_path(args)
    proxy = load_proxy(path).to(device)
    trainer = Trainer(args, model, run)
    calls = handlers(trainer.sampler, proxy, run)

    nodes, total = count_step(args, model, calls, run)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"recursiongfn: SEH fragments (72, at most {args.max_frags}), graph transformer width "
        f"{args.layer_width}, {args.num_layers} layers ({n_params / 1e6:.2f}M parameters), "
        f"{args.batch_size} trajectories per step ({nodes} state-graph nodes in the counted "
        f"one), {args.num_workers} sampling workers, sampling tau {args.sampling_tau}, "
        f"beta {args.beta:g}, proxy {'from ' + str(path) if path else 'STAND-IN'}, "
        f"{args.precision} on {device}, {torch.get_num_threads()} threads, "
        f"{total / nodes / 1e6:.2f} counted MFLOP per node",
        flush=True,
    )
    if args.proxy is None:
        from benchshared.inputs import announce

        announce(entry_name(), {INPUT: folder}, stand_in=STAND_IN)

    with tempfile.TemporaryDirectory(prefix="recursiongfn-", ignore_cleanup_errors=True) as scratch:
        if args.log_dir is None:
            args.log_dir = Path(scratch)
        data, server = loader(args, calls)
        timed = TimedIterator(
            data, batch_size_fn=lambda b: b["x"].shape[0], device=device, units="nodes/s"
        )
        try:
            for batch in timed:
                loss, _info = trainer.step(batch)
                timed.record_loss(loss)
        finally:
            if server is not None:  # the workers go first (the server answers them meanwhile)
                workers = getattr(data, "_iterator", None)
                if workers is not None:
                    workers._shutdown_workers()
                server.stop()


def count_step(
    args: argparse.Namespace, model: GraphTransformerGFN, calls: dict[str, Any], run: Setup
) -> tuple[int, int]:
    """Declare the counted FLOPs of one step per node: a batch sampled here (sampling
    model and proxy) and the loss's forward and backward; matmuls only, so a lower bound
    (trajectory lengths vary). Returns the batch's nodes and the count."""
    from benchkit.flops import count_flops, declare_flops

    counted: dict[str, Any] = {}
    sampler = make_sampler(args, log=False)

    def step() -> None:
        arrays = sampler.sample(lambda name, a: calls[name](a))
        counted["batch"] = {k: torch.as_tensor(v) for k, v in arrays.items()}
        trajectory_balance(model, counted["batch"], run)[0].backward()

    total = count_flops(step)
    model.zero_grad(set_to_none=True)
    nodes = int(counted["batch"]["x"].shape[0])
    declare_flops(total / nodes, precision=args.precision, source="counted")
    return nodes, total


if __name__ == "__main__":
    run_and_exit(main)
