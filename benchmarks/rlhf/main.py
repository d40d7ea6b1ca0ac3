"""RLHF with PPO on randomly initialised GPT-NeoX models (pythia-1b shape), plain torch.

One timed step is one PPO iteration as trl's ``PPOTrainer`` runs it, on a batch of
synthetic prompts:

1. **rollout**: the policy samples a response to every prompt, token by token with its
   KV cache (temperature sampling, fixed response length); the log-probabilities of the
   sampled tokens come from the generation logits (as in trl);
2. **scoring**: a frozen reference policy (the policy's initial weights) gives reference
   log-probabilities (per-token KL penalty), a frozen reward model (GPT-NeoX with a scalar
   head) scores each whole sequence, and the value model estimates per-token values;
3. **advantages**: rewards = -kl_coef * KL per token + the score on the last token;
   generalised advantage estimation (gamma, lambda), whitened advantages;
4. **update**: ``--ppo-epochs`` passes over the batch in ``--mini-batches`` mini-batches,
   each a forward of the policy and the value model with gradients, PPO's clipped policy
   loss + clipped value loss, backward and one AdamW step on both models (trl's
   ``PolicyAndValueWrapper``).

Four models of the same shape, as in trl's PPO example (policy and reference from the
SFT checkpoint, reward and value from the reward checkpoint): here all random, with the
reference a copy of the policy and the value model a copy of the reward model. Nothing is
downloaded; prompts are random token ids. Throughput: items/s, one item = one
(prompt + response) sequence.

Under torchrun (``WORLD_SIZE`` set) the policy and value models train data-parallel
(DistributedDataParallel over ``--backend``); every rank generates for its own prompts,
and rank 0 reports the global rate.

Runs by hand too: ``python main.py --size tiny --precision fp32``.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from benchkit.flops import declare_flops
from benchkit.timing import TimedIterator
from benchkit.torchsetup import (
    add_common_arguments,
    init_distributed,
    optimizer_step,
    setup,
    teardown_distributed,
)

SIZES = {
    # name: (hidden, layers, heads, intermediate, vocab)
    "tiny": (64, 2, 2, 256, 512),
    "pythia-160m": (768, 12, 12, 3072, 50304),
    "pythia-1b": (2048, 16, 8, 8192, 50304),  # EleutherAI/pythia-1b-deduped
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="pythia-1b")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per step and rank")
    parser.add_argument("--prompt-len", type=int, default=64, help="prompt tokens")
    parser.add_argument("--response-len", type=int, default=53, help="generated tokens")
    parser.add_argument("--ppo-epochs", type=int, default=4, help="passes over each rollout")
    parser.add_argument("--mini-batches", type=int, default=1, help="updates per PPO epoch")
    parser.add_argument("--lr", type=float, default=3e-6)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--kl-coef", type=float, default=0.05)
    parser.add_argument("--cliprange", type=float, default=0.2)
    parser.add_argument("--cliprange-value", type=float, default=0.2)
    parser.add_argument("--vf-coef", type=float, default=0.1)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--lam", type=float, default=0.95)
    parser.add_argument("--backend", default=None, help="gloo, nccl, ... (default: by device)")
    add_common_arguments(
        parser,
        default_precision="bf16",
        threads_help="intra-op CPU threads (default under torchrun on CPU: CPUs / local ranks)",
    )
    args = parser.parse_args(argv)
    if args.batch_size % args.mini_batches:
        parser.error("--batch-size must be a multiple of --mini-batches")
    return args


def neox_config(size: str) -> Any:
    """pythia's architecture (parallel residual, rotary on 25% of each head, untied head)."""
    from transformers import GPTNeoXConfig

    hidden, layers, heads, intermediate, vocab = SIZES[size]
    return GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=2048,
        use_parallel_residual=True,
        tie_word_embeddings=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        classifier_dropout=0.0,
        num_labels=1,  # reward and value models: one scalar per position
    )


class PolicyAndValue(nn.Module):
    """The two trained models behind one module, so that one DDP wrapper and one
    optimiser cover both (what trl's PolicyAndValueWrapper does)."""

    def __init__(self, policy: nn.Module, value: nn.Module) -> None:
        super().__init__()
        self.policy = policy
        self.value = value

    def forward(self, seq: torch.Tensor, response_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy logits predicting each response token, and the value of each position
        that precedes a response token."""
        logits = self.policy(input_ids=seq, logits_to_keep=response_len + 1).logits[:, :-1]
        hidden = self.value.gpt_neox(input_ids=seq).last_hidden_state
        values = self.value.score(hidden[:, -response_len - 1 : -1]).squeeze(-1)
        return logits, values


@dataclass
class Models:
    """The four models of a PPO step; ``trained`` may be wrapped in DDP."""

    trained: nn.Module  # PolicyAndValue, or DDP(PolicyAndValue)
    reference: nn.Module
    reward: nn.Module

    @property
    def core(self) -> PolicyAndValue:
        """The trained models without their DDP wrapper (generation, no-grad forwards)."""
        return getattr(self.trained, "module", self.trained)


def build_models(size: str, device: torch.device) -> Models:
    """Random policy and reward model; the reference and the value model start as copies
    of them (trl loads them from the same checkpoints). Built on ``device`` directly: 8
    processes building 4 x 1B fp32 models in host memory would not fit there."""
    from transformers import GPTNeoXForCausalLM, GPTNeoXForSequenceClassification

    config = neox_config(size)
    with torch.device(device):
        policy = GPTNeoXForCausalLM(config)
        reference = GPTNeoXForCausalLM(config)
        reward = GPTNeoXForSequenceClassification(config)
        value = GPTNeoXForSequenceClassification(config)
    reference.load_state_dict(policy.state_dict())
    value.load_state_dict(reward.state_dict())
    for frozen in (reference, reward):
        frozen.requires_grad_(False).eval()
    return Models(PolicyAndValue(policy, value).train(), reference, reward)


@dataclass
class Rollout:
    """What the no-grad part of a step hands to the update (all ``[batch, response]``,
    except ``seq`` ``[batch, prompt + response]``)."""

    seq: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    score: torch.Tensor  # [batch]
    kl: torch.Tensor


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-probabilities of ``tokens`` under temperature-scaled logits (in fp32)."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def generate(
    policy: nn.Module, prompts: torch.Tensor, response_len: int, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``response_len`` tokens per prompt with the KV cache; returns the tokens and
    their log-probabilities. No early stop at EOS: every step does the same work (trl
    also generates to its response length, then masks what follows a stop token)."""
    out = policy(input_ids=prompts, use_cache=True, logits_to_keep=1)
    tokens, logps = [], []
    for i in range(response_len):
        logp = torch.log_softmax(out.logits[:, -1].float() / temperature, dim=-1)
        token = torch.multinomial(logp.exp(), 1)
        tokens.append(token)
        logps.append(logp.gather(-1, token))
        if i + 1 < response_len:
            out = policy(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
    return torch.cat(tokens, dim=1), torch.cat(logps, dim=1)


def gae(
    rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the response; (whitened advantages, returns)."""
    last = torch.zeros_like(rewards[:, 0])
    reversed_adv = []
    length = rewards.shape[1]
    for t in reversed(range(length)):
        next_value = values[:, t + 1] if t + 1 < length else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last = delta + gamma * lam * last
        reversed_adv.append(last)
    advantages = torch.stack(reversed_adv[::-1], dim=1)
    returns = advantages + values
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return advantages, returns


@torch.no_grad()
def rollout(models: Models, prompts: torch.Tensor, args: argparse.Namespace, run: Any) -> Rollout:
    """Generate, score with the reference, value and reward models, compute advantages."""
    core = models.core
    n = args.response_len
    with run.autocast():
        responses, logprobs = generate(core.policy, prompts, n, args.temperature)
        seq = torch.cat([prompts, responses], dim=1)
        ref_logits = models.reference(input_ids=seq, logits_to_keep=n + 1).logits[:, :-1]
        hidden = core.value.gpt_neox(input_ids=seq).last_hidden_state
        values = core.value.score(hidden[:, -n - 1 : -1]).squeeze(-1).float()
        reward_hidden = models.reward.gpt_neox(input_ids=seq).last_hidden_state
        score = models.reward.score(reward_hidden[:, -1]).squeeze(-1).float()
    ref_logprobs = token_logprobs(ref_logits, responses, args.temperature)
    kl = logprobs - ref_logprobs
    rewards = -args.kl_coef * kl
    rewards[:, -1] += score
    advantages, returns = gae(rewards, values, args.gamma, args.lam)
    return Rollout(seq, logprobs, values, advantages, returns, score, kl)


def ppo_update(
    models: Models,
    data: Rollout,
    opt: torch.optim.Optimizer,
    scaler: Any,
    args: argparse.Namespace,
    run: Any,
) -> torch.Tensor:
    """``--ppo-epochs`` passes of clipped-PPO mini-batch updates; returns the last loss."""
    n = args.response_len
    batch = data.seq.shape[0]
    size = batch // args.mini_batches
    loss = torch.zeros((), device=data.seq.device)
    for _ in range(args.ppo_epochs):
        order = torch.randperm(batch, device=data.seq.device)
        for lo in range(0, batch, size):
            idx = order[lo : lo + size]
            seq = data.seq[idx]
            with run.autocast():
                logits, vpred = models.trained(seq, n)
            new_logprobs = token_logprobs(logits, seq[:, -n:], args.temperature)
            vpred = vpred.float()
            ratio = torch.exp(new_logprobs - data.logprobs[idx])
            adv = data.advantages[idx]
            clipped = torch.clamp(ratio, 1.0 - args.cliprange, 1.0 + args.cliprange)
            pg_loss = torch.max(-adv * ratio, -adv * clipped).mean()
            old_values, returns = data.values[idx], data.returns[idx]
            vclipped = old_values + torch.clamp(
                vpred - old_values, -args.cliprange_value, args.cliprange_value
            )
            vf_loss = 0.5 * torch.max((vpred - returns) ** 2, (vclipped - returns) ** 2).mean()
            loss = pg_loss + args.vf_coef * vf_loss
            optimizer_step(loss, opt, scaler)
    return loss


def matmul_params(config: Any) -> tuple[int, int]:
    """(weights multiplied per token in one GPT-NeoX layer stack, hidden size)."""
    d, ff, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return layers * (4 * d * d + 2 * d * ff), d  # qkv + output projection + MLP


def forward_flops(
    config: Any, tokens: int, pairs: int, head_tokens: int, head_out: int, attention: bool
) -> int:
    """FLOPs of a forward over ``tokens`` tokens: 2 per weight per token, attention
    (QK^T and AV: 4 * hidden per query-key pair and layer, ``pairs`` causal pairs) and
    a head of ``head_out`` outputs applied to ``head_tokens`` tokens."""
    body, d = matmul_params(config)
    attn = 4 * d * config.num_hidden_layers * pairs if attention else 0
    return 2 * body * tokens + attn + 2 * d * head_out * head_tokens


def flops_per_sequence(config: Any, args: argparse.Namespace, *, attention: bool = True) -> int:
    """Analytic FLOPs of one (prompt + response) sequence in one PPO step.

    generation (prefill + one token at a time, causal attention over the cache) +
    reference, value and reward forwards over the whole sequence + ``ppo_epochs`` x
    (forward + backward = 3 x forward) of the policy and the value model. Not counted:
    softmax, layer norms, sampling, GAE (element-wise, well under 1%). Without
    ``attention`` it is what ``torch.utils.flop_counter`` counts on a CPU (whose attention
    kernel it does not see; tests/benchmarks/test_rlhf.py compares them)."""
    p, n = args.prompt_len, args.response_len
    total, vocab = p + n, config.vocab_size
    causal = total * (total + 1) // 2

    def fwd(tokens: int, pairs: int, head_tokens: int, head_out: int) -> int:
        return forward_flops(config, tokens, pairs, head_tokens, head_out, attention)

    prefill = fwd(p, p * (p + 1) // 2, 1, vocab)
    decode = fwd(n - 1, sum(pos + 1 for pos in range(p, total - 1)), n - 1, vocab)
    policy = fwd(total, causal, n + 1, vocab)  # the reference has the same shape
    value = fwd(total, causal, n, 1)
    reward = fwd(total, causal, 1, 1)
    rollout_flops = prefill + decode + policy + value + reward
    return rollout_flops + args.ppo_epochs * 3 * (policy + value)


def prompt_pool(args: argparse.Namespace, vocab: int, rank: int, device: torch.device):
    """A few batches of random prompts, different on every rank (tokenising a prompt
    data set is not part of what trl's step measures either)."""
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    return [
        torch.randint(0, vocab, (args.batch_size, args.prompt_len), generator=gen).to(device)
        for _ in range(4)
    ]


def describe(args: argparse.Namespace, models: Models, world: int, device: torch.device) -> None:
    """One line that says what runs (in the run's log)."""
    n_params = sum(p.numel() for p in models.core.policy.parameters())
    print(
        f"rlhf: {args.size} ({n_params / 1e6:.1f}M parameters per model, 4 models), "
        f"world size {world}, batch {args.batch_size} x ({args.prompt_len} prompt + "
        f"{args.response_len} response) per rank, {args.ppo_epochs} PPO epochs x "
        f"{args.mini_batches} mini-batches, {args.precision} on {device}, "
        f"{torch.get_num_threads()} threads",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    try:  # from here on, the process group is destroyed on every exit path
        run = setup(args, device=device)  # same seed on every rank: the same initial weights
        torch.manual_seed(args.seed + rank)  # ... then different sampling per rank

        models = build_models(args.size, device)
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            models.trained = DistributedDataParallel(models.trained, device_ids=ids)
        opt = torch.optim.AdamW(models.trained.parameters(), lr=args.lr, eps=1e-5)
        scaler = run.grad_scaler()
        config = models.core.policy.config
        if rank == 0:
            describe(args, models, world, device)
        # Analytic: equal to a counted step's matmuls (tests/benchmarks/test_rlhf.py), plus
        # the attention the CPU counter cannot see, and no extra step to pay for.
        declare_flops(flops_per_sequence(config, args), precision=args.precision, source="analytic")

        pool = prompt_pool(args, config.vocab_size, rank, device)
        timed = TimedIterator(
            itertools.cycle(pool), batch_size_fn=lambda p: p.shape[0], device=device
        )
        for prompts in timed:
            data = rollout(models, prompts, args, run)
            loss = ppo_update(models, data, opt, scaler, args, run)
            timed.record_loss(loss)
        if world > 1:
            import torch.distributed as dist

            dist.barrier()  # leave together: gloo aborts a peer still in a collective
    finally:
        models = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


if __name__ == "__main__":
    main()
