"""RLHF with PPO on pythia-160m (upstream's weights and prompts when prepared, else a
random stand-in of its shape), the step of trl's ``PPOTrainer``.

What upstream milabench's ``rlhf`` runs is trl's (v0.29.1) experimental ``PPOTrainer``
with ``PPOConfig``'s defaults, except the batch (64 prompts per device). Its four models
come from ``sft_model_path`` and ``reward_model_path``, which upstream leaves at trl's
default, ``EleutherAI/pythia-160m`` (the entry's ``pythia-1b-deduped`` only picks the
tokenizer); they load in fp32. One timed step here is one of trl's PPO iterations, the
same calls on the same shapes:

1. **rollout**, in fp32 without autocast (trl runs the unwrapped models, outside the
   autocast that accelerate puts around the trained wrapper only): the policy samples 53
   tokens per prompt with ``generate`` (temperature 0.7, no top-k / top-p, no stop token:
   every response has its 53 tokens), its per-step scores kept; the reference's logits
   over the whole sequence give the reference log-probabilities; the value and reward
   backbones run over the whole sequence and their scalar heads over every position
   (values per response token, the score at the last one). Log-probabilities are gathered
   as trl does (logsumexp row by row);
2. **advantages**: per-token KL penalty (k1, coefficient 0.05) plus the score on the last
   token, GAE (gamma 1, lambda 0.95), masked whitening;
3. **update**: 4 PPO epochs of 1 mini-batch; each runs the policy and the value backbone
   with their heads over every position under bf16 autocast, outputs cast to fp32 (what
   accelerate's wrapper returns), clipped policy and value losses, backward and a fused
   AdamW step (transformers' default optimiser for torch >= 2.8: lr 3e-6, eps 1e-8, no
   weight decay, no gradient clipping), then trl's no-grad statistics (entropy over the
   full vocabulary, clip fractions, approximate KL);
4. trl's bookkeeping that costs device time: ``torch.cuda.empty_cache()`` after each
   phase, ``gc.collect()``, and 14 step statistics gathered across ranks and read back.

No activation checkpointing: trl's ``gradient_checkpointing`` default (True) is applied by
``Trainer.train``, which ``PPOTrainer`` replaces; nothing in its own ``train`` turns it on.
**Upstream's inputs** (``prepare.py`` fetched them): the four models loaded from
pythia-160m in fp32 (the value and reward heads freshly initialised, as
``from_pretrained(num_labels=1)`` leaves them), the descriptiveness prompts tokenised by
pythia-1b-deduped's tokenizer, shuffled, each batch left-padded with ``[PAD]`` to its
longest. **Stand-in** (not prepared; announced as not comparable): random weights of
``--size``'s shape, the reference a copy of the policy and the value model of the reward
model, random prompts of ``--prompt-len`` tokens. Throughput: prompt tokens per second,
what upstream counts (``batch_size_fn``: batch x padded prompt length).

Under torchrun (``WORLD_SIZE`` set) the policy and value models train data-parallel
(DistributedDataParallel over ``--backend``, as accelerate wraps them); every rank
generates for its own prompts, and rank 0 reports the global rate.

Runs by hand too: ``python main.py --size tiny --precision fp32``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from prompts import MODEL_INPUT, LeftPad, entry_name, prompts_file, read_prompts, real_inputs
from torch import nn

from benchkit.exiting import run_and_exit
from benchkit.flops import declare_flops
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import (
    add_common_arguments,
    init_distributed,
    setup,
    teardown_distributed,
)
from benchshared.inputs import announce

SIZES = {
    # name: (hidden, layers, heads, intermediate, vocab, tokenizer tokens)
    "tiny": (64, 2, 2, 256, 512, 500),
    "pythia-160m": (768, 12, 12, 3072, 50304, 50277),  # EleutherAI/pythia-160m
    "pythia-1b": (2048, 16, 8, 8192, 50304, 50277),  # EleutherAI/pythia-1b-deduped
}
#: trl's PPOConfig.local_rollout_forward_batch_size: rollout forwards in chunks this big.
ROLLOUT_CHUNK = 64
INVALID_LOGPROB = 1.0  # trl's fill value for masked log-probabilities


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="pythia-160m")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per step and rank")
    parser.add_argument("--prompt-len", type=int, default=64, help="stand-in's prompt tokens")
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
    parser.add_argument(
        "--data", default=None, help="prepared prompts (default: $MILABENCH_DIR_DATA/rlhf-...)"
    )
    add_common_arguments(
        parser,
        default_precision="bf16",
        threads_help="intra-op CPU threads (default under torchrun on CPU: CPUs / local ranks)",
    )
    args = parser.parse_args(argv)
    if args.batch_size % args.mini_batches:
        parser.error("--batch-size must be a multiple of --mini-batches")
    # the stand-in's pad and end-of-text ids; main() takes upstream's tokenizer's when prepared
    args.pad_id, args.eos_id = pad_token(args.size), 0
    args.real, args.prompt_mean = False, float(args.prompt_len)
    return args


def pad_token(size: str) -> int:
    """The pad id: one past the tokenizer's tokens (upstream adds ``[PAD]`` to pythia's
    tokenizer, which gets id 50277; the embedding has rows up to 50303)."""
    return SIZES[size][5]


def neox_config(size: str) -> Any:
    """pythia's architecture (parallel residual, rotary on 25% of each head, untied head)."""
    from transformers import GPTNeoXConfig

    hidden, layers, heads, intermediate, vocab, _tokens = SIZES[size]
    return GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=2048,
        rotary_pct=0.25,
        use_parallel_residual=True,
        tie_word_embeddings=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        classifier_dropout=0.0,
        num_labels=1,  # reward and value models: one scalar per position
        pad_token_id=pad_token(size),
    )


class PolicyAndValue(nn.Module):
    """trl's ``PolicyAndValueWrapper``: the two trained models behind one module (one DDP
    wrapper, one optimiser). A forward runs the value backbone (all hidden states) and
    its head over every position, then the policy with the same arguments."""

    def __init__(self, policy: nn.Module, value: nn.Module) -> None:
        super().__init__()
        self.policy = policy
        self.value = value

    def forward(self, **kwargs: Any) -> tuple[Any, torch.Tensor]:
        critic = self.value.gpt_neox(**kwargs)
        values = self.value.score(critic.hidden_states[-1])
        return self.policy(**kwargs), values


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


def build_models(
    size: str,
    device: torch.device,
    pad: int | None = None,
    checkpoint: Path | None = None,
    config: Any = None,
) -> Models:
    """The four models in fp32 on ``device``. From ``checkpoint`` (upstream's inputs):
    each loaded from it as trl's script loads it (the value and reward heads newly
    initialised, each its own). Else random, of ``config`` (default: ``size``'s shape),
    the reference and the value model copies of the policy and the reward model (trl
    loads them from the same checkpoints). No stop token: generation runs to its full
    length (trl's default ``stop_token_id`` None sets the policy's ``eos_token_id`` to
    None)."""
    from transformers import GPTNeoXForCausalLM, GPTNeoXForSequenceClassification

    if checkpoint is not None:
        load = {"dtype": torch.float32, "device_map": device}
        policy = GPTNeoXForCausalLM.from_pretrained(checkpoint, **load)
        reference = GPTNeoXForCausalLM.from_pretrained(checkpoint, **load)
        heads = {"num_labels": 1, **load}
        reward = GPTNeoXForSequenceClassification.from_pretrained(checkpoint, **heads)
        value = GPTNeoXForSequenceClassification.from_pretrained(checkpoint, **heads)
    else:
        config = neox_config(size) if config is None else config
        with torch.device(device):
            policy = GPTNeoXForCausalLM(config)
            reference = GPTNeoXForCausalLM(config)
            reward = GPTNeoXForSequenceClassification(config)
            value = GPTNeoXForSequenceClassification(config)
        reference.load_state_dict(policy.state_dict())
        value.load_state_dict(reward.state_dict())
    policy.generation_config.eos_token_id = None
    policy.generation_config.pad_token_id = pad_token(size) if pad is None else pad
    for frozen in (reference, reward):
        frozen.requires_grad_(False).eval()
    return Models(PolicyAndValue(policy, value).train(), reference, reward)


def model_config(args: argparse.Namespace) -> Any:
    """The models' configuration: pythia-160m's own when upstream's inputs are prepared
    (one scalar label), else ``--size``'s (footprint.py estimates what main.py builds)."""
    found = real_inputs()
    if all(found.values()):
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(found[MODEL_INPUT], num_labels=1)
    return neox_config(args.size)


def generation_config(args: argparse.Namespace) -> Any:
    """trl's sampling settings: ``response_length`` new tokens, temperature + 1e-7, top-k 0
    and top-p 1 (neither filter applies), sampling, no stop token."""
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=args.response_len,
        temperature=args.temperature + 1e-7,
        top_k=0,
        top_p=1.0,
        do_sample=True,
        eos_token_id=None,
        pad_token_id=args.pad_id,
    )


def empty_cache() -> None:
    """trl's ``empty_cache()`` (called after each phase of its step)."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits).gather(index)`` computed as trl computes it: for fp32 logits,
    the gathered logits minus a logsumexp taken one row of the batch at a time; for
    half-precision logits, log_softmax row by row."""
    index = index.unsqueeze(-1)
    if logits.dtype in (torch.float32, torch.float64):
        picked = torch.gather(logits, dim=-1, index=index).squeeze(-1)
        norm = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
        return picked - norm
    rows = [
        torch.log_softmax(row, dim=-1).gather(-1, idx).squeeze(-1)
        for row, idx in zip(logits, index, strict=True)
    ]
    return torch.stack(rows)


def first_true(bools: torch.Tensor) -> torch.Tensor:
    """Index of the first True per row (the row length when there is none)."""
    length = bools.size(-1)
    ranks = length * (~bools).long() + torch.arange(length, device=bools.device)
    return ranks.min(dim=-1).values


def lm_inputs(seq: torch.Tensor, pad: int) -> dict[str, Any]:
    """trl's ``forward`` arguments: pads masked out, positions counted over real tokens,
    every hidden state returned."""
    mask = seq != pad
    return dict(
        input_ids=seq.masked_fill(~mask, 0),
        attention_mask=mask,
        position_ids=mask.cumsum(1) - mask.long(),
        return_dict=True,
        output_hidden_states=True,
    )


def score_all(model: nn.Module, seq: torch.Tensor, pad: int) -> torch.Tensor:
    """trl's ``get_reward``: the backbone over the whole sequence, the scalar head over
    every position; ``[batch, length, 1]``."""
    out = model.gpt_neox(**lm_inputs(seq, pad), use_cache=False)
    return model.score(out.hidden_states[-1])


def to_fp32(value: Any) -> Any:
    """What accelerate's ``convert_outputs_to_fp32`` does to the wrapper's outputs: every
    half-precision tensor, also inside tuples and model outputs, cast to fp32."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in (torch.float16, torch.bfloat16) else value
    if isinstance(value, tuple | list):
        return type(value)(to_fp32(v) for v in value)
    if isinstance(value, dict):  # transformers' ModelOutput is an OrderedDict
        for key in list(value.keys()):
            value[key] = to_fp32(value[key])
        return value
    return value


@dataclass
class Rollout:
    """What the no-grad part of a step hands to the update (``[batch, response]`` unless
    said otherwise)."""

    seq: torch.Tensor  # [batch, prompt + response]
    responses: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    padding: torch.Tensor  # response positions after the end (none without a stop token)
    padding_p1: torch.Tensor
    score: torch.Tensor  # [batch]
    kl: torch.Tensor


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum()


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean = masked_mean(values, mask)
    centred = values - mean
    var = masked_mean(centred**2, mask) * mask.sum() / (mask.sum() - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8)


@torch.no_grad()
def rollout(models: Models, queries: torch.Tensor, args: argparse.Namespace, run: Any) -> Rollout:
    """Generate, score with the reference, value and reward models, compute advantages
    (fp32, no autocast: ``run`` is not used for precision here)."""
    core, pad = models.core, args.pad_id
    config = generation_config(args)
    context = queries.shape[1]
    seqs, logprobs, ref_logprobs, values, scores = [], [], [], [], []
    for lo in range(0, queries.shape[0], ROLLOUT_CHUNK):
        query = queries[lo : lo + ROLLOUT_CHUNK]
        mask = query != pad
        out = core.policy.generate(
            input_ids=query.masked_fill(~mask, 0),
            attention_mask=mask,
            generation_config=config,
            return_dict_in_generate=True,
            output_scores=True,
        )
        seq = torch.cat([query, out.sequences[:, context:]], dim=1)
        response = seq[:, context:]
        logits = torch.stack(out.scores, 1)  # temperature-scaled, fp32
        logprobs.append(selective_log_softmax(logits, response))
        del logits, out
        empty_cache()
        ref_logits = models.reference(**lm_inputs(seq, pad)).logits[:, context - 1 : -1]
        ref_logits /= args.temperature + 1e-7
        ref_logprobs.append(selective_log_softmax(ref_logits, response))
        del ref_logits
        empty_cache()
        last = first_true(response == pad) - 1 + context  # no stop token: the last position
        values.append(score_all(core.value, seq, pad)[:, context - 1 : -1].squeeze(-1))
        reward = score_all(models.reward, seq, pad)
        scores.append(reward[torch.arange(reward.size(0), device=seq.device), last].squeeze(-1))
        seqs.append(seq)
    seq = torch.cat(seqs)
    responses = seq[:, context:]
    logprob, ref_logprob = torch.cat(logprobs), torch.cat(ref_logprobs)
    value, score = torch.cat(values), torch.cat(scores)
    empty_cache()
    gc.collect()

    lengths = first_true(responses == pad) - 1
    index = torch.arange(responses.shape[1], device=seq.device).repeat(responses.shape[0], 1)
    padding = index > lengths.unsqueeze(1)
    logprob = logprob.masked_fill(padding, INVALID_LOGPROB)
    ref_logprob = ref_logprob.masked_fill(padding, INVALID_LOGPROB)
    lengths_p1 = lengths + 1
    padding_p1 = index > lengths_p1.unsqueeze(1)
    value = value.masked_fill(padding_p1, 0)

    kl = logprob - ref_logprob  # trl's k1 estimator
    rewards = -args.kl_coef * kl
    rows = torch.arange(rewards.size(0), device=seq.device)
    end = torch.where(lengths_p1 < rewards.size(1), lengths_p1, lengths)
    rewards[rows, end] += score

    last_gae = torch.zeros_like(rewards[:, 0])
    reversed_adv = []
    length = responses.shape[1]
    for t in reversed(range(length)):
        next_value = value[:, t + 1] if t < length - 1 else 0.0
        delta = rewards[:, t] + args.gamma * next_value - value[:, t]
        last_gae = delta + args.gamma * args.lam * last_gae
        reversed_adv.append(last_gae)
    advantages = torch.stack(reversed_adv[::-1], dim=1)
    returns = advantages + value
    advantages = masked_whiten(advantages, (~padding).float()).masked_fill(padding, 0)
    empty_cache()
    return Rollout(seq, responses, logprob, value, advantages, returns, padding, padding_p1,
                   score, kl)  # fmt: skip


def ppo_update(
    models: Models,
    data: Rollout,
    opt: torch.optim.Optimizer,
    args: argparse.Namespace,
    run: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``--ppo-epochs`` passes of clipped-PPO mini-batch updates, then trl's no-grad step
    statistics; returns (the last loss, the statistics ``[epochs, mini-batches, 7]``)."""
    pad, context = args.pad_id, data.seq.shape[1] - data.responses.shape[1]
    batch = data.seq.shape[0]
    size = batch // args.mini_batches
    stats = torch.zeros(args.ppo_epochs, args.mini_batches, 7, device=data.seq.device)
    loss = torch.zeros((), device=data.seq.device)
    for epoch in range(args.ppo_epochs):
        order = torch.randperm(batch).to(data.seq.device)
        for mini, lo in enumerate(range(0, batch, size)):
            idx = order[lo : lo + size]
            seq, responses = data.seq[idx], data.responses[idx]
            padding, padding_p1 = data.padding[idx], data.padding_p1[idx]
            with run.autocast():
                output, vpred_all = models.trained(**lm_inputs(seq, pad))
            output, vpred_all = to_fp32(output), to_fp32(vpred_all)
            logits = output.logits[:, context - 1 : -1]
            logits /= args.temperature + 1e-7
            new_logprobs = selective_log_softmax(logits, responses)
            new_logprobs = new_logprobs.masked_fill(padding, INVALID_LOGPROB)
            vpred = vpred_all[:, context - 1 : -1].squeeze(-1).masked_fill(padding_p1, 0)
            old_values, returns = data.values[idx], data.returns[idx]
            vclipped = torch.clamp(
                vpred, old_values - args.cliprange_value, old_values + args.cliprange_value
            )
            vf_losses1 = (vpred - returns) ** 2
            vf_losses2 = (vclipped - returns) ** 2
            kept_p1 = (~padding_p1).float()
            vf_loss = 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), kept_p1)
            vf_clipfrac = masked_mean((vf_losses2 > vf_losses1).float(), kept_p1)
            diff = new_logprobs - data.logprobs[idx]
            ratio = torch.exp(diff)
            adv = data.advantages[idx]
            pg_losses = -adv * ratio
            pg_losses2 = -adv * torch.clamp(ratio, 1.0 - args.cliprange, 1.0 + args.cliprange)
            kept = (~padding).float()
            pg_loss = masked_mean(torch.max(pg_losses, pg_losses2), kept)
            loss = pg_loss + args.vf_coef * vf_loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            with torch.no_grad():
                pg_clipfrac = masked_mean((pg_losses2 > pg_losses).float(), kept)
                prob = torch.softmax(logits, dim=-1)
                entropy = torch.logsumexp(logits, dim=-1) - torch.sum(prob * logits, dim=-1)
                approxkl = 0.5 * (diff**2).mean()
                stats[epoch, mini] = torch.stack([
                    approxkl, pg_clipfrac, pg_loss, vf_loss, vf_clipfrac,
                    entropy.mean(), ratio.mean(),
                ])  # fmt: skip
            del output, vpred_all, logits, prob, entropy
            empty_cache()
    return loss.detach(), stats


def report_statistics(
    data: Rollout, stats: torch.Tensor, args: argparse.Namespace, world: int
) -> list[float]:
    """trl's end-of-step metrics: 13 values gathered across ranks and read back (one
    device synchronisation each, as ``gather_for_metrics(...).mean().item()``), the ratio's
    variance and the count of end-of-sequence tokens."""
    non_score = (-args.kl_coef * data.kl).sum(1).mean()
    values = [
        data.kl.sum(1).mean(),
        (-data.logprobs).sum(1).mean(),
        non_score,
        non_score + data.score.mean(),
        data.score.mean(),
        *stats.unbind(-1),
        stats[..., 6],
    ]
    out = []
    for i, value in enumerate(values):
        if world > 1:
            import torch.distributed as dist

            gathered = [torch.zeros_like(value) for _ in range(world)]
            dist.all_gather(gathered, value.contiguous())
            value = torch.stack(gathered)
        value = value.float()
        out.append((value.var() if i == len(values) - 1 else value.mean()).item())
    out.append(float((data.responses == args.eos_id).sum().item()))  # end-of-text count
    empty_cache()
    gc.collect()
    return out


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

    generation (prefill with the LM head on its last token, then one token at a time with
    causal attention over the cache) + the reference over the whole sequence (LM head on
    every position) + the value and reward backbones (scalar head on every position) +
    ``ppo_epochs`` x (forward + backward = 3 x forward) of the policy (LM head on every
    position) and the value backbone. Not counted: softmax, entropy, layer norms,
    sampling, GAE (element-wise). Without ``attention`` it is what
    ``torch.utils.flop_counter`` counts on a CPU (whose attention kernel it does not see;
    tests/benchmarks/test_rlhf.py compares them)."""
    p, n = args.prompt_len, args.response_len
    total, vocab = p + n, config.vocab_size
    causal = total * (total + 1) // 2

    def fwd(tokens: int, pairs: int, head_tokens: int, head_out: int) -> int:
        return forward_flops(config, tokens, pairs, head_tokens, head_out, attention)

    prefill = fwd(p, p * (p + 1) // 2, 1, vocab)
    decode = fwd(n - 1, sum(pos + 1 for pos in range(p, total - 1)), n - 1, vocab)
    policy = fwd(total, causal, total, vocab)  # the reference has the same shape
    value = fwd(total, causal, total, 1)  # the reward model too
    rollout_flops = prefill + decode + policy + 2 * value
    return rollout_flops + args.ppo_epochs * 3 * (policy + value)


def prompt_pool(args: argparse.Namespace, rank: int, device: torch.device) -> list[torch.Tensor]:
    """A few batches of random prompts (no pad token), different on every rank
    (tokenising a prompt data set is not part of what trl's step measures either)."""
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    pad = pad_token(args.size)
    return [
        torch.randint(0, pad, (args.batch_size, args.prompt_len), generator=gen).to(device)
        for _ in range(4)
    ]


def prompt_batches(
    prompts: list[list[int]],
    args: argparse.Namespace,
    rank: int,
    world: int,
    device: torch.device,
) -> Iterator[torch.Tensor]:
    """Upstream's training prompts, pass after pass as trl's ``repeat_generator`` serves
    them: shuffled (this rank's share under torchrun), ``--batch-size`` a batch, the last
    partial batch dropped, each left-padded to its longest with the pad id."""
    sampler = None
    if world > 1:
        sampler = torch.utils.data.DistributedSampler(prompts, world, rank, seed=args.seed)
    loader = torch.utils.data.DataLoader(
        prompts,  # type: ignore[arg-type] - a list of token-id lists is a map-style data set
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        drop_last=True,
        collate_fn=LeftPad(args.pad_id),
    )
    if len(loader) == 0:
        raise SystemExit(
            f"rlhf: {len(prompts)} prompts make no batch of {args.batch_size} on each of "
            f"{world} ranks"
        )
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        for batch in loader:
            yield batch.to(device, non_blocking=True)
        epoch += 1


def mean_padded_length(prompts: list[list[int]], batch_size: int, seed: int) -> float:
    """A batch's padded length (its longest prompt), on average over one shuffled pass:
    the sequence length the FLOPs formula is evaluated at."""
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed))
    batches = order[: len(order) - len(order) % batch_size].view(-1, batch_size)
    if len(batches) == 0:
        return float(max(len(p) for p in prompts))
    return sum(max(len(prompts[i]) for i in b.tolist()) for b in batches) / len(batches)


def describe(args: argparse.Namespace, models: Models, world: int, device: torch.device) -> None:
    """One line that says what runs (in the run's log)."""
    n_params = sum(p.numel() for p in models.core.policy.parameters())
    what = f"{MODEL_INPUT} weights" if args.real else args.size
    prompt = (
        f"descriptiveness prompts left-padded to each batch's longest, {args.prompt_mean:.1f} "
        "tokens on average,"
        if args.real
        else f"{args.prompt_len} prompt"
    )
    print(
        f"rlhf: {what} ({n_params / 1e6:.1f}M parameters per model, 4 models), "
        f"world size {world}, batch {args.batch_size} x ({prompt} + "
        f"{args.response_len} response) per rank, {args.ppo_epochs} PPO epochs x "
        f"{args.mini_batches} mini-batches, rollout fp32, update {args.precision} on "
        f"{device}, {torch.get_num_threads()} threads",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = init_distributed(args)
    try:  # from here on, the process group is destroyed on every exit path
        run = setup(args, device=device)  # same seed on every rank: the same initial weights
        used = real_inputs()
        args.real = all(used.values())
        prompts: list[list[int]] = []
        if args.real:
            prepared = read_prompts(prompts_file(args.data))
            prompts, args.pad_id, args.eos_id = (
                prepared["prompts"], prepared["pad_id"], prepared["eos_id"]
            )  # fmt: skip
            args.prompt_mean = mean_padded_length(prompts, args.batch_size, args.seed)
            args.prompt_len = round(args.prompt_mean)  # the FLOPs' and memory's length
        check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
        checkpoint = used[MODEL_INPUT] if args.real else None
        models = build_models(args.size, device, args.pad_id, checkpoint)
        torch.manual_seed(args.seed + rank)  # ... then different sampling per rank
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            models.trained = DistributedDataParallel(models.trained, device_ids=ids)
        opt = torch.optim.AdamW(
            models.trained.parameters(),
            lr=args.lr,
            eps=1e-8,
            weight_decay=0.0,
            fused=device.type == "cuda",
        )
        config = models.core.policy.config
        if rank == 0:
            describe(args, models, world, device)
        # Analytic, per prompt token (the rate's item): equal to a counted step's matmuls
        # (tests/benchmarks/test_rlhf.py), plus the attention the CPU counter cannot see.
        per_token = flops_per_sequence(config, args) / args.prompt_len
        declare_flops(per_token, precision=args.precision, source="analytic")

        if args.real:
            batches: Iterator[torch.Tensor] = prompt_batches(prompts, args, rank, world, device)
        else:
            batches = itertools.cycle(prompt_pool(args, rank, device))
        stand_in = (
            f"random-weight models of the {args.size} shape on random {args.prompt_len}-token "
            "prompts"
        )
        announce(entry_name(), used, stand_in=stand_in)
        timed = TimedIterator(
            batches, batch_size_fn=lambda p: p.numel(), device=device, units="Tok/s"
        )
        for prompts in timed:
            data = rollout(models, prompts, args, run)
            loss, stats = ppo_update(models, data, opt, args, run)
            report_statistics(data, stats, args, world)
            timed.record_loss(loss)
            del data, stats
            empty_cache()
        if world > 1:
            import torch.distributed as dist

            dist.barrier()  # leave together: gloo aborts a peer still in a collective
    finally:
        models = opt = timed = None  # noqa: F841 - DDP's reducer goes before its group
        teardown_distributed()


if __name__ == "__main__":
    run_and_exit(main)
