"""Memory of an RLHF entry per GPU and per node (`benchkit.memory`): the four GPT-NeoX
models built on the meta device (policy and value trained with AdamW, reference and
reward frozen), and the PPO update's forward + backward of one mini-batch of prompt +
response sequences measured there: the largest part of a step (the rollout runs without
gradients; its KV cache is smaller). Under torchrun the trained pair is wrapped in DDP.
The models are built directly on their device. With upstream's inputs prepared, the
checkpoint's configuration and ``--prompt-len`` set by main.py to the prompts' mean
padded length."""

from __future__ import annotations

import argparse

from benchkit.memory import Footprint, Workload, estimate, sibling_main


def footprint(args: argparse.Namespace, world: int, ranks_per_node: int) -> Footprint:
    """The footprint of ``args`` (main.py's options) on ``world`` ranks."""
    import torch

    bench = sibling_main(__file__)

    def make() -> Workload:
        config = bench.model_config(args)  # pythia-160m's own with upstream's inputs
        models = bench.build_models(args.size, torch.device("meta"), config=config)
        n = args.response_len
        size = args.batch_size // args.mini_batches

        def step() -> None:
            # the update's forward (no padding here: a mask changes values, not sizes)
            seq = torch.zeros(size, args.prompt_len + n, dtype=torch.long)
            output, values = models.trained(
                input_ids=seq, return_dict=True, output_hidden_states=True
            )
            logits = output.logits[:, -n - 1 : -1].float()
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, seq[:, -n:, None])
            (values.float().pow(2).mean() - logprobs.mean()).backward()

        return Workload([models.trained], step, frozen=[models.reference, models.reward])

    return estimate(
        make,
        precision=args.precision,
        parallel="ddp" if world > 1 else "none",
        world=world,
        ranks_per_node=ranks_per_node,
        built_on="device",
    )
