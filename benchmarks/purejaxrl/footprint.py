"""Memory of a purejaxrl entry (ppo, dqn, brax) per GPU and per node (`benchkit.memory`).

JAX has no meta device and no torch module to build there; these workloads are small
MLPs whose memory is their data: it is sized from the arguments, standard library only.
Weights in fp32 (the MLPs of main.py: ppo's actor and critic of 2 x ``--hidden``, dqn's
Q-network of 120 and 84 and its target copy, brax's default networks of 4 x 32 for the
policy and 5 x 256 for the value), Adam's two states; the data: ppo's rollout
(``--num-envs`` x ``--num-steps`` transitions), dqn's replay buffer (``--buffer-size``
observations in their own dtype) and sampled batch, brax's unrolls (``--batch-size`` x
``--num-minibatches`` x ``--unroll-length`` transitions); every environment's physics
state (`ENV_STATE`, brax's pipeline state, generous). The data count twice: XLA keeps an
iteration's inputs and outputs alive together (buffers are donated, not always)."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint

#: (observation floats, actions) of the environments of the standard suite
ENVS = {
    "hopper": (11, 3),
    "ant": (27, 8),
    "CartPole-v1": (4, 2),
    "SpaceInvaders-MinAtar": (600, 6),
}
ENV_STATE = 16 * 1024  # bytes of one brax environment's pipeline state (positional: ~5 KB)
FLOAT = 4


def _mlp(sizes: list[int]) -> int:
    return sum((a + 1) * b for a, b in zip(sizes, sizes[1:], strict=False))


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options): one process on its node."""
    try:
        obs, act = ENVS[args.env_name]
    except KeyError:
        raise SystemExit(
            f"--env-name {args.env_name}: no size known for the memory estimate "
            f"(known: {', '.join(ENVS)})"
        ) from None
    transition = 2 * obs + act + 4  # observation, next observation, action, reward, done...
    if args.algo == "ppo":
        params = _mlp([obs, args.hidden, args.hidden, act]) + _mlp(
            [obs, args.hidden, args.hidden, 1]
        )
        data = args.num_envs * args.num_steps * transition * FLOAT
        physics = args.num_envs * ENV_STATE
    elif args.algo == "dqn":
        params = 2 * _mlp([obs, 120, 84, act])  # online and target networks
        data = args.buffer_size * (obs + act + 2) * FLOAT
        data += args.buffer_batch_size * transition * FLOAT
        physics = args.num_envs * obs * FLOAT
    else:
        params = _mlp([obs, 32, 32, 32, 32, 2 * act]) + _mlp([obs, 256, 256, 256, 256, 256, 1])
        steps = args.batch_size * args.num_minibatches * args.unroll_length
        data = steps * transition * FLOAT
        physics = args.num_envs * ENV_STATE
    weights = params * FLOAT
    return Footprint(
        params=weights,
        grads=weights,
        optimizer=2 * weights,
        activations=2 * data,
        other=physics,
        ranks_per_node=ranks_per_node,
        notes=("sized from the arguments (JAX: no meta device)",),
    )
