"""Reinforcement learning written end to end in JAX: upstream milabench's ``ppo``, ``dqn``
and ``brax`` workloads on the environments of brax and gymnax.

* ``ppo`` (upstream's purejaxrl ``ppo.py``, written here in plain JAX): brax ``hopper``
  on the ``positional`` physics back-end, episodes of 1000 steps, actions clipped to
  [-1, 1]; observations normalised by their running mean and variance, rewards by the
  running standard deviation of the discounted return (gamma 0.99); Gaussian policy and
  value MLPs of 2 x ``--hidden`` (256, tanh, orthogonal initialisation); GAE (0.99,
  0.95), clipped objective (0.2) with a clipped value loss (coefficient 0.5), entropy
  coefficient 0, ``--update-epochs`` x ``--num-minibatches`` Adam steps (eps 1e-5,
  gradient norm clipped at 0.5) per iteration. One timed step is one iteration (the
  rollout of ``--num-envs`` x ``--num-steps`` and the update) in one XLA program. With
  several local devices the environments are split over them (``jax.pmap``) and the
  gradients averaged. ``--count-every N`` reports one iteration's environment steps per
  N iterations, as upstream's timer does with N = 10 (config/standard.yaml): the figure
  is then a tenth of the environment steps/s, in items/s.
* ``dqn`` (upstream's purejaxrl ``dqn.py``): gymnax ``SpaceInvaders-MinAtar`` (10 x 10 x
  6 observations as float32, flattened), Q-network MLP (120, 84, relu); a replay buffer
  laid out as flashbax's flat buffer (``--num-envs`` rows x ``--buffer-size / --num-envs``
  time slots, observations stored once, a sample is a pair of consecutive slots); epsilon-greedy with epsilon annealed from 1.0 to 0.05 over 250,000
  steps; a squared-error TD update on ``--buffer-batch-size`` sampled transitions when
  the environment-step count is a multiple of ``--training-interval`` (with 128
  environments and 10: every 5 iterations), once the buffer can be sampled and after
  ``--learning-starts`` steps; target network copied when the step count is a multiple
  of 500. One timed step is the iterations from one update to the next; the iterations
  before learning starts run before the clock does.
* ``brax`` (upstream's ``benchmarks/brax``): brax's own PPO trainer,
  ``brax.training.agents.ppo.train.train``, with upstream's arguments and brax's default
  networks; one timed step is one of its training epochs (the evaluations between
  epochs are not timed), which is what its ``training/sps`` measures.

Throughput: environment steps per second (``ppo`` with ``--count-every``: see above). A
timed step's output is awaited (``block_until_ready``), and compilation is never
measured (``ppo``, ``dqn``: before the clock starts; ``brax``: its first epoch, a
warm-up step). No FLOP count is declared: an environment step has no meaningful
matmul count. ``--dry-run`` prints the resolved workload (JSON) and exits.
Runs by hand: ``python main.py ppo --env-name hopper --num-envs 16``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

DEFAULT_ENV = {"ppo": "hopper", "dqn": "SpaceInvaders-MinAtar", "brax": "ant"}
# upstream's learning rates: purejaxrl ppo.py and brax/main.py 3e-4, dqn.py 2.5e-4
DEFAULT_LR = {"ppo": 3e-4, "dqn": 2.5e-4, "brax": 3e-4}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algo", choices=["ppo", "dqn", "brax"])
    parser.add_argument(
        "--env-name",
        "--env_name",
        "--env",
        dest="env_name",
        default=None,
        help="default: hopper (ppo), SpaceInvaders-MinAtar (dqn), ant (brax)",
    )
    parser.add_argument(
        "--backend",
        default=None,
        help="brax physics back-end (default: positional for ppo, as upstream's "
        "purejaxrl; the environment's own for brax)",
    )
    parser.add_argument("--num-envs", "--num_envs", dest="num_envs", type=int, default=128)
    parser.add_argument("--lr", "--learning-rate", dest="lr", type=float, default=None)
    # ppo
    parser.add_argument("--num-steps", "--num_steps", dest="num_steps", type=int, default=10)
    parser.add_argument(
        "--num-minibatches", "--num_minibatches", dest="num_minibatches", type=int, default=32
    )
    parser.add_argument(
        "--update-epochs", "--update_epochs", dest="update_epochs", type=int, default=4
    )
    parser.add_argument(
        "--episode-length",
        type=int,
        default=None,
        help="default: 1000 (ppo, upstream's BraxGymnaxWrapper), 10 (brax)",
    )
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument(
        "--no-normalize",
        dest="normalize",
        action="store_false",
        help="ppo: no observation and reward normalisation",
    )
    parser.add_argument(
        "--count-every",
        type=int,
        default=1,
        help="ppo: count one iteration's environment steps per N iterations",
    )
    # dqn
    parser.add_argument(
        "--buffer-size", "--buffer_size", dest="buffer_size", type=int, default=131072
    )
    parser.add_argument(
        "--buffer-batch-size",
        "--buffer_batch_size",
        dest="buffer_batch_size",
        type=int,
        default=65536,
    )
    parser.add_argument(
        "--training-interval",
        "--training_interval",
        dest="training_interval",
        type=int,
        default=10,
        help="dqn: environment steps between updates",
    )
    parser.add_argument(
        "--learning-starts", "--learning_starts", dest="learning_starts", type=int, default=10000
    )
    # brax (brax.training.agents.ppo.train's arguments, upstream's defaults)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--unroll-length", type=int, default=5)
    parser.add_argument("--num-timesteps", type=int, default=100_000_000)
    parser.add_argument("--num-evals", type=int, default=500)
    parser.add_argument("--discounting", type=float, default=0.97)
    parser.add_argument("--entropy-cost", type=float, default=0.01)
    parser.add_argument("--reward-scaling", type=float, default=0.1)
    # all
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: JAX's)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="ignored: XLA has no CPU thread setting (bound it with taskset)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the resolved workload (JSON) and exit"
    )
    # upstream's argv, accepted: total_timesteps is a step budget; time is ours
    parser.add_argument(
        "--total-timesteps",
        "--total_timesteps",
        dest="total_timesteps",
        type=int,
        default=None,
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)
    args.env_name = args.env_name or DEFAULT_ENV[args.algo]
    args.lr = DEFAULT_LR[args.algo] if args.lr is None else args.lr
    if args.episode_length is None:
        args.episode_length = 1000 if args.algo == "ppo" else 10
    if args.count_every < 1:
        parser.error("--count-every must be at least 1")
    return args


def configure(args: argparse.Namespace) -> None:
    """JAX's platform, before jax is imported (`benchkit.jaxsetup`)."""
    from benchkit.jaxsetup import configure as configure_jax

    # JAX allocates as it goes instead of taking 75% of the GPU at start (upstream's too)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    configure_jax(args.device, args.threads)


@dataclass
class Workload:
    """A jitted iteration and how to count it: ``step(carry) -> (carry, (loss, ready))``,
    ``ready`` false while the iteration is not yet the steady state (DQN before its
    first update): such iterations run before the clock starts."""

    init: Any
    step: Any
    items: float  # counted per timed step
    units: str
    description: dict[str, Any] = field(default_factory=dict)


def dense_init(key: Any, sizes: list[int], init: Any, head: Any = None) -> list[tuple[Any, Any]]:
    """(weight, bias) per layer: ``init`` for the hidden layers, ``head`` for the last."""
    import jax
    import jax.numpy as jnp

    params = []
    keys = jax.random.split(key, len(sizes) - 1)
    for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
        fn = head if head is not None and i == len(sizes) - 2 else init
        params.append((fn(k, (n_in, n_out), jnp.float32), jnp.zeros(n_out)))
    return params


def mlp(params: list[tuple[Any, Any]], x: Any, act: Any) -> Any:
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = act(x)
    return x


def strong(tree: Any) -> Any:
    """``tree`` without weak types: JAX compiles a step again when a leaf of its carry
    changes from weak to strong typed between two calls (brax's trainer does the same)."""
    import jax
    import jax.numpy as jnp

    return jax.tree_util.tree_map(lambda x: jnp.asarray(x).astype(jnp.asarray(x).dtype), tree)


def widths(params: list[tuple[Any, Any]]) -> list[int]:
    return [int(params[0][0].shape[0])] + [int(w.shape[1]) for w, _ in params]


# -- PPO on brax (upstream's purejaxrl ppo.py) ------------------------------------------

GAMMA, GAE_LAMBDA, CLIP_EPS, VF_COEF, ENT_COEF, MAX_GRAD_NORM, ADAM_EPS = (
    0.99, 0.95, 0.2, 0.5, 0.0, 0.5, 1e-5,
)  # fmt: skip


def running_stats(stats: tuple[Any, Any, Any], batch: Any) -> tuple[Any, Any, Any]:
    """(mean, var, count) updated with a batch along axis 0 (parallel variance update)."""
    mean, var, count = stats
    n = batch.shape[0]
    delta = batch.mean(axis=0) - mean
    total = count + n
    m2 = var * count + batch.var(axis=0) * n + delta**2 * count * n / total
    return mean + delta * n / total, m2 / total, total


def make_ppo(args: argparse.Namespace) -> Workload:
    import jax
    import jax.numpy as jnp
    import optax
    from brax import envs
    from brax.envs.wrappers.training import AutoResetWrapper, EpisodeWrapper

    n_dev = jax.local_device_count()
    if args.num_envs % n_dev:
        raise SystemExit(f"--num-envs {args.num_envs} is not a multiple of {n_dev} devices")
    per_dev = args.num_envs // n_dev
    backend = args.backend or "positional"
    base = envs.get_environment(args.env_name, backend=backend)
    env = AutoResetWrapper(EpisodeWrapper(base, args.episode_length, 1))
    v_reset, v_step = jax.vmap(env.reset), jax.vmap(env.step)  # one env, vectorised
    # observation size from the traced reset (brax's property runs a reset op by op)
    obs_size = jax.eval_shape(base.reset, jax.random.PRNGKey(0)).obs.shape[-1]
    act_size = env.action_size
    optimiser = optax.chain(optax.clip_by_global_norm(MAX_GRAD_NORM),
                            optax.adam(args.lr, eps=ADAM_EPS))  # fmt: skip
    batch = per_dev * args.num_steps
    if batch % args.num_minibatches:
        raise SystemExit(f"{batch} transitions per device do not split in "
                         f"{args.num_minibatches} minibatches")  # fmt: skip
    orthogonal = jax.nn.initializers.orthogonal
    hidden = [args.hidden, args.hidden]

    def observe(stats: Any, obs: Any) -> tuple[Any, Any]:
        """Running statistics updated with this batch, and the batch normalised by them."""
        if not args.normalize:
            return stats, obs
        stats = running_stats(stats, obs)
        return stats, (obs - stats[0]) / jnp.sqrt(stats[1] + 1e-8)

    def init_params(key: Any) -> dict[str, Any]:
        k1, k2 = jax.random.split(key)
        return {
            "actor": dense_init(k1, [obs_size, *hidden, act_size], orthogonal(math.sqrt(2)),
                                orthogonal(0.01)),
            "log_std": jnp.zeros(act_size),
            "critic": dense_init(k2, [obs_size, *hidden, 1], orthogonal(math.sqrt(2)),
                                 orthogonal(1.0)),
        }  # fmt: skip

    def init(key: Any) -> Any:
        k1, k2, k3 = jax.random.split(key, 3)
        params = init_params(k1)

        def reset(k: Any) -> dict[str, Any]:
            state = v_reset(jax.random.split(k, per_dev))
            one = jnp.ones((), jnp.float32)
            obs_stats, obs = observe((jnp.zeros(obs_size), jnp.ones(obs_size), 1e-4 * one),
                                     state.obs)  # fmt: skip
            return {"state": state, "obs": obs, "obs_stats": obs_stats,
                    "ret_stats": (0 * one, one, 1e-4 * one), "ret": jnp.zeros(per_dev)}  # fmt: skip

        envs_ = jax.pmap(reset)(jax.random.split(k2, n_dev))
        rep = jax.tree_util.tree_map(
            lambda x: jnp.stack([x] * n_dev), (params, optimiser.init(params))
        )  # one copy per device
        # placed by a pmap of the same axis name as the step's: JAX lays out what a pmap
        # returns by its axis name, and would compile the step again for the second call
        # if the first one's carry were laid out differently
        carry = (rep, envs_, jax.random.split(k3, n_dev))
        return jax.pmap(strong, axis_name="devices")(carry)

    def policy(params: Any, obs: Any) -> tuple[Any, Any]:
        return mlp(params["actor"], obs, jnp.tanh), mlp(params["critic"], obs, jnp.tanh)[..., 0]

    def log_prob(params: Any, mean: Any, a: Any) -> Any:
        z = (a - mean) / jnp.exp(params["log_std"])
        return jnp.sum(-0.5 * z**2 - params["log_std"] - 0.5 * math.log(2 * math.pi), axis=-1)

    def loss_fn(params: Any, mb: dict) -> Any:
        mean, value = policy(params, mb["obs"])
        ratio = jnp.exp(log_prob(params, mean, mb["act"]) - mb["logp"])
        clipped = mb["value"] + jnp.clip(value - mb["value"], -CLIP_EPS, CLIP_EPS)
        value_loss = 0.5 * jnp.maximum((value - mb["ret"]) ** 2, (clipped - mb["ret"]) ** 2).mean()
        adv = (mb["adv"] - mb["adv"].mean()) / (mb["adv"].std() + 1e-8)
        pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIP_EPS, 1 + CLIP_EPS) * adv).mean()
        # entropy of the diagonal Gaussian, per sample as the distribution object gives it
        entropy = jnp.broadcast_to(
            jnp.sum(params["log_std"] + 0.5 * math.log(2 * math.pi * math.e)), ratio.shape
        ).mean()
        return pg + VF_COEF * value_loss - ENT_COEF * entropy

    def step(carry: Any) -> tuple[Any, Any]:
        (params, opt_state), env_carry, key = carry

        def act(c: Any, _: Any) -> tuple[Any, Any]:
            e, k = c
            k, sub = jax.random.split(k)
            seen = e["obs"]
            mean, value = policy(params, seen)
            a = mean + jnp.exp(params["log_std"]) * jax.random.normal(sub, mean.shape)
            logp = log_prob(params, mean, a)
            nxt = v_step(e["state"], jnp.clip(a, -1.0, 1.0))
            done = (nxt.done > 0.5).astype(jnp.float32)
            obs_stats, obs = observe(e["obs_stats"], nxt.obs)
            reward, ret, ret_stats = nxt.reward, e["ret"], e["ret_stats"]
            if args.normalize:
                ret = ret * GAMMA * (1 - done) + reward
                ret_stats = running_stats(ret_stats, ret)
                reward = reward / jnp.sqrt(ret_stats[1] + 1e-8)
            e = {"state": nxt, "obs": obs, "obs_stats": obs_stats, "ret_stats": ret_stats,
                 "ret": ret}  # fmt: skip
            return (e, k), (seen, a, logp, value, reward, done)

        (env_carry, key), (obs, a, logp, value, rew, done) = jax.lax.scan(
            act, (env_carry, key), None, length=args.num_steps
        )
        _, last = policy(params, env_carry["obs"])

        def gae(c: Any, x: Any) -> tuple[Any, Any]:
            adv, nxt_value = c
            r, d, v = x
            delta = r + GAMMA * nxt_value * (1 - d) - v
            adv = delta + GAMMA * GAE_LAMBDA * (1 - d) * adv
            return (adv, v), adv

        _, advs = jax.lax.scan(gae, (jnp.zeros_like(last), last), (rew, done, value),
                               reverse=True, unroll=16)  # fmt: skip
        data = {"obs": obs, "act": a, "logp": logp, "value": value, "adv": advs,
                "ret": advs + value}  # fmt: skip
        data = jax.tree_util.tree_map(lambda x: x.reshape(batch, *x.shape[2:]), data)

        def epoch(c: Any, k: Any) -> tuple[Any, Any]:
            perm = jax.random.permutation(k, batch)
            mbs = jax.tree_util.tree_map(
                lambda x: x[perm].reshape(args.num_minibatches, -1, *x.shape[1:]), data
            )

            def update(c2: Any, mb: Any) -> tuple[Any, Any]:
                p, o = c2
                loss, grads = jax.value_and_grad(loss_fn)(p, mb)
                grads = jax.lax.pmean(grads, "devices")
                upd, o = optimiser.update(grads, o, p)
                return (optax.apply_updates(p, upd), o), loss

            return jax.lax.scan(update, c, mbs)

        key, sub = jax.random.split(key)
        (params, opt_state), losses = jax.lax.scan(
            epoch, (params, opt_state), jax.random.split(sub, args.update_epochs)
        )
        loss = jax.lax.pmean(losses.mean(), "devices")
        return strong(((params, opt_state), env_carry, key)), (loss, jnp.bool_(True))

    env_steps = args.num_envs * args.num_steps
    shapes = jax.eval_shape(init_params, jax.random.PRNGKey(0))  # the networks init builds
    return Workload(
        init=init,
        step=jax.pmap(step, axis_name="devices", donate_argnums=0),
        items=env_steps / args.count_every,
        units="steps/s" if args.count_every == 1 else "items/s",
        description={
            "env": args.env_name,
            "backend": getattr(base, "backend", None),
            "episode_length": args.episode_length,
            "observation_size": obs_size,
            "actor": widths(shapes["actor"]),
            "critic": widths(shapes["critic"]),
            "activation": "tanh",
            "normalize": args.normalize,
            "adam_eps": ADAM_EPS,
            "lr": args.lr,
            "max_grad_norm": MAX_GRAD_NORM,
            "num_envs": args.num_envs,
            "num_steps": args.num_steps,
            "minibatch": batch // args.num_minibatches,
            "update_epochs": args.update_epochs,
            "env_steps_per_iteration": env_steps,
            "count_every": args.count_every,
        },
    )


# -- DQN on gymnax (upstream's purejaxrl dqn.py) ----------------------------------------

EPS_START, EPS_FINISH, EPS_ANNEAL, TARGET_EVERY, DQN_GAMMA = 1.0, 0.05, 250_000, 500, 0.99


def make_dqn(args: argparse.Namespace) -> Workload:
    import gymnax
    import jax
    import jax.numpy as jnp
    import optax

    env, env_params = gymnax.make(args.env_name)
    n, n_act = args.num_envs, env.action_space(env_params).n
    obs_size = math.prod(env.observation_space(env_params).shape)
    v_reset = jax.vmap(env.reset, in_axes=(0, None))
    vmapped_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def v_step(keys: Any, state: Any, action: Any) -> tuple[Any, Any, Any, Any]:
        """(obs, state, reward, done): gymnax 1.x returns terminated and truncated where
        0.0.x (upstream's pin) returns their union, done."""
        out = vmapped_step(keys, state, action, env_params)
        done = out[3] | out[4] if len(out) == 6 else out[3]
        return out[0], out[1], out[2], done

    # flashbax's flat buffer: (envs, time) slots; a sample is the pair (t, t + 1) of a row
    slots = args.buffer_size // n
    min_slots = args.buffer_batch_size // n + 1
    if slots < 2 or min_slots > slots:
        raise SystemExit(f"--buffer-size {args.buffer_size} is too small for {n} envs and "
                         f"--buffer-batch-size {args.buffer_batch_size}")  # fmt: skip
    # iterations from one update to the next: the step count grows by n per iteration and
    # an update happens when it is a multiple of --training-interval
    period = args.training_interval // math.gcd(n, args.training_interval)
    optimiser = optax.adam(args.lr)
    key0 = jax.random.PRNGKey(0)
    obs0, st0 = jax.eval_shape(lambda k: v_reset(jax.random.split(k, n), env_params), key0)
    out0 = jax.eval_shape(
        lambda k, s: v_step(jax.random.split(k, n), s, jnp.zeros(n, jnp.int32)), key0, st0
    )
    rew_dtype, done_dtype = out0[2].dtype, out0[3].dtype
    lecun = jax.nn.initializers.lecun_normal()

    def q_values(params: Any, obs: Any) -> Any:
        return mlp(params, obs.astype(jnp.float32), jax.nn.relu)

    def init_params(key: Any) -> list[tuple[Any, Any]]:
        return dense_init(key, [obs_size, 120, 84, n_act], lecun)

    def init(key: Any) -> Any:
        k1, k2, k3 = jax.random.split(key, 3)
        params = init_params(k1)
        obs, state = v_reset(jax.random.split(k2, n), env_params)
        buffer = {
            "obs": jnp.zeros((n, slots, obs_size), obs0.dtype),
            "act": jnp.zeros((n, slots), jnp.int32),
            "rew": jnp.zeros((n, slots), rew_dtype),
            "done": jnp.zeros((n, slots), done_dtype),
        }
        target = jax.tree_util.tree_map(jnp.copy, params)  # own buffers: the carry is donated
        adds, t = jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)
        return strong((params, target, optimiser.init(params), obs.reshape(n, -1), state,
                       buffer, adds, t, k3))  # fmt: skip

    def step(carry: Any) -> tuple[Any, Any]:
        params, target, opt_state, obs, state, buffer, adds, t, key = carry

        def one(c: Any, _: Any) -> tuple[Any, Any]:
            obs, state, buffer, adds, t, key = c
            key, k_act, k_eps, k_env = jax.random.split(key, 4)
            greedy = jnp.argmax(q_values(params, obs), axis=-1)
            eps = jnp.maximum((EPS_FINISH - EPS_START) / EPS_ANNEAL * t + EPS_START, EPS_FINISH)
            explore = jax.random.randint(k_act, (n,), 0, n_act)
            action = jnp.where(jax.random.uniform(k_eps, (n,)) < eps, explore, greedy)
            nxt, state, rew, done = v_step(jax.random.split(k_env, n), state, action)
            col = adds % slots
            buffer = {
                "obs": buffer["obs"].at[:, col].set(obs),
                "act": buffer["act"].at[:, col].set(action),
                "rew": buffer["rew"].at[:, col].set(rew),
                "done": buffer["done"].at[:, col].set(done),
            }
            t = t + n
            return (nxt.reshape(n, -1), state, buffer, adds + 1, t, key), t % TARGET_EVERY == 0

        (obs, state, buffer, adds, t, key), copies = jax.lax.scan(
            one, (obs, state, buffer, adds, t, key), None, length=period
        )

        # upstream copies the target after each iteration's update: a copy before the last
        # iteration takes the parameters as they are, one on the last follows the update
        target = jax.tree_util.tree_map(
            lambda tg, p: jnp.where(copies[:-1].any(), p, tg), target, params
        )

        def learn(p: Any, o: Any, k: Any) -> tuple[Any, Any, Any]:
            k_time, k_row = jax.random.split(k)
            full = adds >= slots
            length = jnp.where(full, slots, adds)
            head = jnp.where(full, adds % slots, 0)
            t0 = (head + jax.random.randint(k_time, (args.buffer_batch_size,), 0,
                                            length - 1)) % slots  # fmt: skip
            row = jax.random.randint(k_row, (args.buffer_batch_size,), 0, n)
            first = {name: x[row, t0] for name, x in buffer.items()}
            second = buffer["obs"][row, (t0 + 1) % slots]
            y = first["rew"] + (1 - first["done"]) * DQN_GAMMA * q_values(target, second).max(-1)

            def loss_fn(p: Any) -> Any:
                q = jnp.take_along_axis(q_values(p, first["obs"]), first["act"][:, None], 1)
                return jnp.mean((q[:, 0] - y) ** 2)

            loss, grads = jax.value_and_grad(loss_fn)(p)
            upd, o = optimiser.update(grads, o, p)
            return optax.apply_updates(p, upd), o, loss

        def skip(p: Any, o: Any, k: Any) -> tuple[Any, Any, Any]:
            return p, o, jnp.zeros((), jnp.float32)

        key, sub = jax.random.split(key)
        ready = (adds >= min_slots) & (t > args.learning_starts)
        new, opt_state, loss = jax.lax.cond(ready, learn, skip, params, opt_state, sub)
        target = jax.tree_util.tree_map(lambda tg, p: jnp.where(copies[-1], p, tg), target, new)
        return strong((new, target, opt_state, obs, state, buffer, adds, t, key)), (loss, ready)

    env_steps = n * period
    shapes = jax.eval_shape(init_params, key0)  # the network init builds
    return Workload(
        init=init,
        step=jax.jit(step, donate_argnums=0),  # the buffer is updated in place
        items=env_steps,
        units="steps/s",
        description={
            "env": args.env_name,
            "observation": [obs_size, str(obs0.dtype)],
            "q_network": widths(shapes),
            "loss": "squared error",
            "lr": args.lr,
            "epsilon": [EPS_START, EPS_FINISH, EPS_ANNEAL],
            "num_envs": n,
            "buffer": [n, slots],
            "buffer_batch_size": args.buffer_batch_size,
            "iterations_per_update": period,
            "learning_starts": args.learning_starts,
            "min_buffer": min_slots * n,
            "target_every": TARGET_EVERY,
            "env_steps_per_iteration": env_steps,
        },
    )


# -- brax's own PPO trainer (upstream's benchmarks/brax) --------------------------------


def brax_train_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """brax.training.agents.ppo.train.train's arguments as upstream's brax/main.py passes
    them (everything else at brax's defaults)."""
    return {
        "num_timesteps": args.num_timesteps,
        "discounting": args.discounting,
        "learning_rate": args.lr,
        "entropy_cost": args.entropy_cost,
        "normalize_observations": True,
        "action_repeat": 1,
        "num_evals": args.num_evals,
        "reward_scaling": args.reward_scaling,
        "episode_length": args.episode_length,
        "unroll_length": args.unroll_length,
        "num_minibatches": args.num_minibatches,
        "num_envs": args.num_envs,
        "batch_size": args.batch_size,
        "seed": args.seed,
    }


def describe_brax(args: argparse.Namespace, env: Any) -> dict[str, Any]:
    import inspect

    from brax.training.agents.ppo import networks, train

    nets = inspect.signature(networks.make_ppo_networks).parameters
    trainer = inspect.signature(train.train).parameters
    kwargs = brax_train_kwargs(args)
    per_training_step = args.batch_size * args.unroll_length * args.num_minibatches
    per_epoch = math.ceil(args.num_timesteps / (max(args.num_evals - 1, 1) * per_training_step))
    return {
        "env": args.env_name,
        "backend": getattr(env, "backend", None),
        "trainer": "brax.training.agents.ppo.train.train",
        "train": kwargs,
        "policy_hidden": list(nets["policy_hidden_layer_sizes"].default),
        "value_hidden": list(nets["value_hidden_layer_sizes"].default),
        "activation": nets["activation"].default.__name__,
        "num_updates_per_batch": trainer["num_updates_per_batch"].default,
        "env_steps_per_training_step": per_training_step,
        "training_steps_per_epoch": per_epoch,
        "env_steps_per_epoch": per_epoch * per_training_step,
    }


def provide_device_put_replicated() -> None:
    """brax 0.14.2's trainer calls ``jax.device_put_replicated``, which JAX 0.10 removed
    from its namespace (upstream pins JAX 0.9.2, where it exists). Where it is missing, an
    equivalent: the value stacked once per device and placed by a pmap of the trainer's
    axis name, so that its training epoch sees the same layout on the first call as on the
    next ones (another layout would compile it twice). Runs once, when the trainer places
    its state."""
    import jax
    from brax.training.agents.ppo import train

    try:
        jax.device_put_replicated  # noqa: B018 - the lookup is the test
        return
    except AttributeError:
        pass
    import jax.numpy as jnp

    def device_put_replicated(x: Any, devices: Any) -> Any:
        stacked = jax.tree.map(lambda a: jnp.stack([jnp.asarray(a)] * len(devices)), x)
        return jax.pmap(lambda t: t, axis_name=train._PMAP_AXIS_NAME, devices=devices)(stacked)

    jax.device_put_replicated = device_put_replicated


def run_brax(args: argparse.Namespace) -> None:
    """brax's trainer; a timed step is one training epoch, from the moment it starts to
    the moment brax has its results (``policy_params_fn`` is called right after each
    epoch, ``progress_fn`` after the evaluation that follows it)."""
    import jax
    from brax import envs
    from brax.training.agents.ppo.train import train

    from benchkit.steps import StepTimer

    kwargs = {} if args.backend is None else {"backend": args.backend}
    env = envs.get_environment(args.env_name, **kwargs)
    print("purejaxrl: " + json.dumps({"algo": "brax", **describe_brax(args, env)}), flush=True)
    print(f"purejaxrl: {jax.local_device_count()} {jax.default_backend()} device(s)", flush=True)
    if args.dry_run:
        return
    provide_device_put_replicated()
    timer = StepTimer(units="steps/s", on_stop="raise")
    done = {"steps": 0}

    def epoch_done(step: int, make_policy: Any, params: Any) -> None:
        if step > done["steps"]:
            timer.exit(step - done["steps"])  # may raise StopProgram: the window is over
            done["steps"] = step
        else:  # called once before the first epoch
            timer.enter()

    def progress(step: int, metrics: dict[str, Any]) -> None:
        if "training/total_loss" in metrics:
            timer.record_loss(float(metrics["training/total_loss"]))
        timer.enter()  # the next epoch starts

    try:
        train(environment=env, progress_fn=progress, policy_params_fn=epoch_done,
              **brax_train_kwargs(args))  # fmt: skip
    finally:
        timer.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure(args)
    import jax

    from benchkit.jaxsetup import require_device
    from benchkit.stopping import run_main
    from benchkit.timing import TimedIterator

    require_device(args.device)  # one line and exit when JAX cannot see it: no CPU fallback
    if args.algo == "brax":
        run_main(run_brax, args)
        return

    work = (make_ppo if args.algo == "ppo" else make_dqn)(args)
    print("purejaxrl: " + json.dumps({"algo": args.algo, **work.description}), flush=True)
    print(f"purejaxrl: {args.algo} on {args.env_name}, {args.num_envs} envs, "
          f"{jax.local_device_count()} {jax.default_backend()} device(s)", flush=True)  # fmt: skip
    if args.dry_run:
        return
    carry = work.init(jax.random.PRNGKey(args.seed))

    def iterations() -> Any:
        nonlocal carry
        ready = False
        while not ready:  # compilation, and DQN's iterations before its first update
            carry, (loss, ready) = work.step(carry)
            ready = bool(jax.device_get(ready).all())
        while True:
            carry, (loss, _) = work.step(carry)
            yield jax.block_until_ready(loss)  # the timer sees completed work only

    timed = TimedIterator(iterations(), batch_size=lambda _: work.items, units=work.units)
    for loss in timed:
        timed.record_loss(float(loss.mean()) if hasattr(loss, "mean") else float(loss))


if __name__ == "__main__":
    from benchkit.exiting import run_and_exit

    run_and_exit(main)
