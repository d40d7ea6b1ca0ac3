"""Llama inference: top-k sampling with a KV cache from a randomly initialised
Llama-2-7B-shaped model, in generated tokens per second.

The standard suite's ``llama`` entry (tagged ``inference nobatch gated``: the real
weights need Meta's licence, which is why ours are random). The model is
`transformers.LlamaForCausalLM` from a `LlamaConfig` with Llama-2-7B's shape (hidden
4096, 32 layers, 32 heads, intermediate 11008, vocabulary 32000), built directly on the
device in the inference dtype (``--dtype``, bf16 as upstream). A step samples
``--new-tokens`` tokens (256, upstream's ``max_new_tokens``) with top-k 10 (upstream's
``do_sample=True, top_k=10``) after a ``--prompt-len`` prompt of random ids (256:
upstream truncates its wikitext prompts to 256 tokens) for ``--batch-size`` sequences
(default 1: latency-bound decoding, which is what ``nobatch`` means); the rate counts
generated tokens. End of sequence is ignored so every step generates the same number of
tokens (random weights would otherwise stop at a random point).

Not upstream's figure: upstream counts the prompt's tokens plus the characters of the
returned text (prompt included) per second, which needs its tokenizer, wikitext-103 and
the real weights (with them generation stops at the end of sequence); the suite marks
the entry ``parity: different`` with weight 0 (docs/parity.md).

FLOPs are analytic: a forward pass costs ``2 x parameters`` per token (the attention
over the cache adds ``4 x layers x hidden x context``, small at these lengths and left
out), declared per generated token with the prompt's share spread over them.
Runs by hand: ``python main.py --size tiny --device cpu``.
"""

from __future__ import annotations

import argparse
import itertools

import torch

from benchkit.exiting import run_and_exit
from benchkit.flops import declare_flops
from benchkit.memory import check_memory
from benchkit.timing import TimedIterator
from benchkit.torchsetup import add_common_arguments, setup

SIZES = {
    # name: (hidden, layers, heads, kv heads, intermediate, vocab)
    "7b": (4096, 32, 32, 32, 11008, 32000),
    "tiny": (64, 2, 4, 4, 172, 512),
}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="7b")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--top-k", type=int, default=10, help="0: greedy decoding")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    add_common_arguments(parser, precisions=None)
    return parser.parse_args(argv)


def make_model(size: str, dtype: torch.dtype, device: torch.device):
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, heads, kv_heads, intermediate, vocab = SIZES[size]
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate,
        max_position_embeddings=4096,
    )
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, torch_dtype=dtype)
    return model.eval(), config


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args)
    device = run.device
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    dtype = DTYPES[args.dtype]
    model, config = make_model(args.size, dtype, device)
    n_params = sum(p.numel() for p in model.parameters())
    decoding = f"top-k {args.top_k} sampling" if args.top_k else "greedy"
    print(
        f"llama: {args.size} ({n_params / 1e9:.2f}B parameters), batch {args.batch_size}, "
        f"prompt {args.prompt_len} + {args.new_tokens} new tokens, {decoding}, "
        f"{args.dtype} on {device}, "
        f"{torch.get_num_threads()} threads",
        flush=True,
    )
    gen = torch.Generator().manual_seed(args.seed)
    prompts = [
        torch.randint(0, config.vocab_size, (args.batch_size, args.prompt_len), generator=gen).to(
            device
        )
        for _ in range(4)
    ]
    per_token = 2.0 * n_params * (args.prompt_len + args.new_tokens) / args.new_tokens
    declare_flops(per_token, precision=args.dtype, source="analytic", task="train")

    timed = TimedIterator(
        itertools.cycle(prompts),
        batch_size=args.batch_size * args.new_tokens,
        device=device,
        units="Tok/s",
    )
    # upstream's pipeline call: do_sample=True, top_k=10 (--top-k 0: greedy decoding)
    sampling = dict(do_sample=True, top_k=args.top_k) if args.top_k else dict(do_sample=False)
    with torch.inference_mode():
        for prompt in timed:
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                **sampling,
                pad_token_id=0,
                eos_token_id=None,
            )
            assert out.shape[1] == args.prompt_len + args.new_tokens


if __name__ == "__main__":
    run_and_exit(main)
