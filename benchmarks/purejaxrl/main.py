"""Reinforcement learning written end to end in JAX: PPO on brax physics environments and
DQN on gymnax's CartPole, environment, rollout and update in one jitted step.

The standard suite's ``ppo`` (brax hopper), ``brax`` (brax ant, 8192 parallel
environments) and ``dqn`` (gymnax CartPole-v1) entries, in the style of purejaxrl: the
whole training iteration (``num_steps`` environment steps for ``num_envs`` environments,
then the update) is one XLA program, so the accelerator runs both the simulator and the
networks. Our own code on the environments of brax and gymnax:

* ``ppo``: Gaussian policy and value MLPs (2 x 64, tanh), GAE (0.99, 0.95), clipped
  objective (0.2), ``--update-epochs`` x ``--num-minibatches`` Adam steps per iteration.
  With several local devices the environments are split over them (``jax.pmap``) and the
  gradients averaged (``lax.pmean``): one process uses every GPU of the node, as
  upstream's brax entry does.
* ``dqn``: Q-network MLP (2 x 120, 84), a replay buffer of ``--buffer-size`` transitions
  in device memory, epsilon-greedy exploration, one TD update on ``--buffer-batch-size``
  sampled transitions every ``--training-interval`` environment steps, target network
  copied every 500 updates.

Throughput: environment steps per second. A timed step is one jitted iteration; its
output is awaited (``block_until_ready``) so the timer measures completed work, and the
first call (compilation) happens in the warm-up. No FLOP count is declared: an
environment step has no meaningful matmul count.
Runs by hand: ``python main.py ppo --env-name hopper --num-envs 16``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algo", choices=["ppo", "dqn"])
    parser.add_argument("--env-name", "--env_name", dest="env_name", default=None)
    parser.add_argument("--num-envs", "--num_envs", dest="num_envs", type=int, default=128)
    parser.add_argument("--num-steps", "--num_steps", dest="num_steps", type=int, default=10)
    parser.add_argument("--num-minibatches", "--num_minibatches", dest="num_minibatches",
                        type=int, default=32)  # fmt: skip
    parser.add_argument("--update-epochs", "--update_epochs", dest="update_epochs",
                        type=int, default=4)  # fmt: skip
    parser.add_argument("--episode-length", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--buffer-size", "--buffer_size", dest="buffer_size", type=int,
                        default=131072)  # fmt: skip
    parser.add_argument("--buffer-batch-size", "--buffer_batch_size", dest="buffer_batch_size",
                        type=int, default=65536)  # fmt: skip
    parser.add_argument("--training-interval", "--training_interval", dest="training_interval",
                        type=int, default=10)  # fmt: skip
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: JAX's)")
    parser.add_argument("--threads", type=int, default=None, help="XLA CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    # upstream's argv, accepted: total_timesteps is a step budget; time is ours
    parser.add_argument("--total-timesteps", "--total_timesteps", dest="total_timesteps",
                        type=int, default=None, help=argparse.SUPPRESS)  # fmt: skip
    return parser.parse_args(argv)


def configure(args: argparse.Namespace) -> None:
    """JAX platform and CPU threads, before jax is imported."""
    if args.device == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if args.threads:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (
            f"{flags} --xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={args.threads}"
        ).strip()


def mlp_init(key: Any, sizes: list[int]) -> list[tuple[Any, Any]]:
    import jax
    import jax.numpy as jnp

    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (n_in, n_out)) * jnp.sqrt(2.0 / n_in),
                       jnp.zeros(n_out)))  # fmt: skip
    return params


def mlp(params: list[tuple[Any, Any]], x: Any, act: Any) -> Any:
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = act(x)
    return x


# -- PPO on brax ------------------------------------------------------------------------


def make_ppo(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(init, step) of PPO on a brax environment; step(state) -> (state, loss)."""
    import jax
    import jax.numpy as jnp
    import optax
    from brax import envs
    from brax.envs.wrappers import training as wrappers

    n_dev = jax.local_device_count()
    if args.num_envs % n_dev:
        raise SystemExit(f"--num-envs {args.num_envs} is not a multiple of {n_dev} devices")
    per_dev = args.num_envs // n_dev
    env = envs.get_environment(args.env_name or "hopper", backend="generalized")
    env = wrappers.AutoResetWrapper(
        wrappers.EpisodeWrapper(wrappers.VmapWrapper(env), args.episode_length, 1)
    )
    obs_size, act_size = env.observation_size, env.action_size
    optimiser = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(args.lr))
    batch = per_dev * args.num_steps
    if batch % args.num_minibatches:
        raise SystemExit(f"{batch} transitions per device do not split in "
                         f"{args.num_minibatches} minibatches")  # fmt: skip

    def init(key: Any) -> Any:
        k1, k2, k3 = jax.random.split(key, 3)
        params = {
            "actor": mlp_init(k1, [obs_size, args.hidden, args.hidden, act_size]),
            "log_std": jnp.zeros(act_size),
            "critic": mlp_init(k2, [obs_size, args.hidden, args.hidden, 1]),
        }
        keys = jax.random.split(k3, n_dev)
        states = jax.pmap(env.reset)(jax.vmap(lambda k: jax.random.split(k, per_dev))(keys))
        rep = jax.tree_util.tree_map(
            lambda x: jnp.stack([x] * n_dev), (params, optimiser.init(params))
        )  # one copy per device: pmap places them
        return rep, states, keys

    def policy(params: Any, obs: Any) -> tuple[Any, Any]:
        return mlp(params["actor"], obs, jnp.tanh), mlp(params["critic"], obs, jnp.tanh)[..., 0]

    def loss_fn(params: Any, mb: dict) -> Any:
        mean, value = policy(params, mb["obs"])
        std = jnp.exp(params["log_std"])
        logp = jnp.sum(-0.5 * ((mb["act"] - mean) / std) ** 2 - params["log_std"], axis=-1)
        ratio = jnp.exp(logp - mb["logp"])
        adv = (mb["adv"] - mb["adv"].mean()) / (mb["adv"].std() + 1e-8)
        pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 0.8, 1.2) * adv).mean()
        return pg + 0.5 * ((value - mb["ret"]) ** 2).mean()

    def step(carry: Any) -> tuple[Any, Any]:
        (params, opt_state), state, key = carry

        def act(c: Any, _: Any) -> tuple[Any, Any]:
            st, k = c
            k, sub = jax.random.split(k)
            mean, value = policy(params, st.obs)
            std = jnp.exp(params["log_std"])
            a = mean + std * jax.random.normal(sub, mean.shape)
            logp = jnp.sum(-0.5 * ((a - mean) / std) ** 2 - params["log_std"], axis=-1)
            nxt = env.step(st, a)
            return (nxt, k), (st.obs, a, logp, value, nxt.reward, nxt.done)

        (state, key), (obs, a, logp, value, rew, done) = jax.lax.scan(
            act, (state, key), None, length=args.num_steps
        )
        _, last = policy(params, state.obs)

        def gae(c: Any, x: Any) -> tuple[Any, Any]:
            adv, nxt_value = c
            r, d, v = x
            delta = r + 0.99 * nxt_value * (1 - d) - v
            adv = delta + 0.99 * 0.95 * (1 - d) * adv
            return (adv, v), adv

        _, advs = jax.lax.scan(gae, (jnp.zeros_like(last), last), (rew, done, value),
                               reverse=True)  # fmt: skip
        data = {"obs": obs, "act": a, "logp": logp, "adv": advs, "ret": advs + value}
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
        return ((params, opt_state), state, key), jax.lax.pmean(losses.mean(), "devices")

    return init, jax.pmap(step, axis_name="devices"), args.num_envs * args.num_steps


# -- DQN on gymnax ----------------------------------------------------------------------


def make_dqn(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(init, step) of DQN on a gymnax environment; step(state) -> (state, loss)."""
    import gymnax
    import jax
    import jax.numpy as jnp
    import optax

    env, env_params = gymnax.make(args.env_name or "CartPole-v1")
    obs_size = env.observation_space(env_params).shape[0]
    n_act = env.action_space(env_params).n
    optimiser = optax.adam(args.lr)
    n, size = args.num_envs, args.buffer_size
    v_reset = jax.vmap(env.reset, in_axes=(0, None))
    v_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def init(key: Any) -> Any:
        k1, k2 = jax.random.split(key)
        params = mlp_init(k1, [obs_size, 120, 84, n_act])
        obs, state = v_reset(jax.random.split(k2, n), env_params)
        buffer = {
            "obs": jnp.zeros((size, obs_size)),
            "act": jnp.zeros(size, jnp.int32),
            "rew": jnp.zeros(size),
            "next": jnp.zeros((size, obs_size)),
            "done": jnp.zeros(size),
        }
        return (params, params, optimiser.init(params), obs, state, buffer, 0, 0, key)

    def step(carry: Any) -> tuple[Any, Any]:
        params, target, opt_state, obs, state, buffer, pos, updates, key = carry

        def one(c: Any, _: Any) -> tuple[Any, Any]:
            obs, state, buffer, pos, key = c
            key, k_eps, k_act, k_env = jax.random.split(key, 4)
            greedy = jnp.argmax(mlp(params, obs, jax.nn.relu), axis=-1)
            explore = jax.random.randint(k_act, (n,), 0, n_act)
            action = jnp.where(jax.random.uniform(k_eps, (n,)) < 0.1, explore, greedy)
            # gymnax 1.x: (obs, state, reward, done, info) or with a discount before info
            out = v_step(jax.random.split(k_env, n), state, action, env_params)
            nxt, state, rew, done = out[0], out[1], out[2], out[3]
            at = (pos + jnp.arange(n)) % size
            buffer = {
                "obs": buffer["obs"].at[at].set(obs),
                "act": buffer["act"].at[at].set(action),
                "rew": buffer["rew"].at[at].set(rew),
                "next": buffer["next"].at[at].set(nxt),
                "done": buffer["done"].at[at].set(done.astype(jnp.float32)),
            }
            return (nxt, state, buffer, pos + n, key), None

        (obs, state, buffer, pos, key), _ = jax.lax.scan(
            one, (obs, state, buffer, pos, key), None, length=args.training_interval
        )
        key, sub = jax.random.split(key)
        filled = jnp.minimum(pos, size)
        idx = jax.random.randint(sub, (args.buffer_batch_size,), 0, filled)
        mb = jax.tree_util.tree_map(lambda x: x[idx], buffer)

        def loss_fn(p: Any) -> Any:
            q = jnp.take_along_axis(mlp(p, mb["obs"], jax.nn.relu), mb["act"][:, None], 1)[:, 0]
            nxt = mlp(target, mb["next"], jax.nn.relu).max(-1)
            y = mb["rew"] + 0.99 * (1 - mb["done"]) * jax.lax.stop_gradient(nxt)
            return optax.huber_loss(q, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        upd, opt_state = optimiser.update(grads, opt_state, params)
        params = optax.apply_updates(params, upd)
        updates = updates + 1
        target = jax.tree_util.tree_map(
            lambda t, p: jnp.where(updates % 500 == 0, p, t), target, params
        )
        return (params, target, opt_state, obs, state, buffer, pos, updates, key), loss

    return init, jax.jit(step), args.num_envs * args.training_interval


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure(args)
    import jax

    from benchkit.timing import TimedIterator

    init, step, env_steps = (make_ppo if args.algo == "ppo" else make_dqn)(args)
    carry = init(jax.random.PRNGKey(args.seed))
    print(
        f"purejaxrl: {args.algo} on {args.env_name or ('hopper' if args.algo == 'ppo' else 'CartPole-v1')}, "
        f"{args.num_envs} envs, {env_steps} environment steps per iteration, "
        f"{jax.local_device_count()} {jax.default_backend()} device(s)",
        flush=True,
    )

    def iterations() -> Any:
        nonlocal carry
        while True:
            carry, loss = step(carry)
            yield jax.block_until_ready(loss)  # the timer sees completed work only

    timed = TimedIterator(iterations(), batch_size=env_steps, units="steps/s")
    for loss in timed:
        timed.record_loss(float(loss.mean()) if hasattr(loss, "mean") else float(loss))


if __name__ == "__main__":
    main()
