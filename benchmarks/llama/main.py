"""Llama inference: upstream's Llama-2-7b-chat text generation on wikitext-103 prompts,
or, without those inputs, a loudly marked random-weight stand-in.

With the three `INPUTS` prepared (prepare.py) the run is upstream's ``--pretrained`` one
(pretrained.py, wikitext.py): wikitext-103's train lines, truncated to ``--prompt-len``
tokens, top-k ``--top-k`` sampling of at most ``--new-tokens`` tokens, stopping at end of
sequence, one prompt per call; rate: the prompt's tokens plus the characters of the
returned text (prompt included) per second, labelled Tok/s as upstream does.
Without one of them the stand-in runs, and the ``inputs`` record marks it not comparable:
a ``LlamaForCausalLM`` of ``--size`` (Llama-2-7B's shape) with random weights in
``--dtype``, ``--batch-size`` prompts of ``--prompt-len`` random ids, exactly
``--new-tokens`` tokens each (end of sequence ignored), in generated tokens/s, FLOPs
declared analytically (2 x parameters per token, the prompt's share spread over the
generated tokens). ``--size`` shapes the stand-in only. By hand: ``python main.py --size
tiny --device cpu``.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

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
#: The entry, and upstream's inputs it reads (names of benchshared.catalogue).
ENTRY = "llama"
WEIGHTS, TOKENIZER, WIKITEXT = "llama2-7b-chat", "llama2-tokenizer", "wikitext-103"
INPUTS = (WEIGHTS, TOKENIZER, WIKITEXT)
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


def located_inputs() -> dict[str, Path | None]:
    """Each of upstream's inputs: its verified folder, or None when not prepared."""
    from benchshared.inputs import locate

    return {name: locate(name) for name in INPUTS}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args)
    check_memory(__file__, args, run.device)  # skips, with the numbers, if it cannot fit
    used = located_inputs()
    if all(folder is not None for folder in used.values()):
        run_pretrained(args, run.device, used)
    else:
        run_stand_in(args, run.device, used)


def announce(used: dict[str, Path | None], new_tokens: int) -> None:
    """The ``inputs`` record (rank 0): upstream's inputs, or the stand-in that ran."""
    from benchshared.inputs import announce as write_inputs_record

    stand_in = f"random weights, {new_tokens} generated tokens per prompt"
    write_inputs_record(ENTRY, used, stand_in=stand_in)


def run_pretrained(args: argparse.Namespace, device: torch.device, used: dict[str, Path]) -> None:
    """Upstream's run: real weights and tokenizer, wikitext-103 prompts, upstream's count."""
    from pretrained import Prompts, Tally, generate, generation_settings, load_pipeline, parameters
    from wikitext import WikitextPrompts

    if args.batch_size != 1:
        raise SystemExit(
            f"llama: --batch-size {args.batch_size}: with upstream's inputs each call "
            "generates from one prompt, as upstream does (--batch-size 1)"
        )
    pipe = load_pipeline(
        used[WEIGHTS], used[TOKENIZER], DTYPES[args.dtype], device, args.prompt_len
    )
    settings = generation_settings(pipe, args.top_k, args.new_tokens)
    decoding = f"top-k {args.top_k} sampling" if args.top_k else "greedy"
    print(
        f"llama: upstream's inputs: {used[WEIGHTS]} ({parameters(pipe) / 1e9:.2f}B "
        f"parameters), tokenizer {used[TOKENIZER]}, wikitext-103 train prompts truncated "
        f"to {args.prompt_len} tokens, at most {args.new_tokens} new tokens (stops at end "
        f"of sequence), {decoding}, {args.dtype} on {device}, "
        f"{torch.get_num_threads()} threads; rate: prompt tokens + returned characters "
        "per second (upstream's Tok/s)",
        flush=True,
    )
    announce(used, args.new_tokens)
    # No FLOPs declaration: an item is a prompt token or a returned character, and the
    # work of each differs. The step ends on the host (the returned text), so the host
    # clock times it, as upstream's time.time() does.
    timed = TimedIterator(
        Prompts(WikitextPrompts(used[WIKITEXT])),
        batch_size=lambda prompt: prompt.items,
        device="cpu",
        units="Tok/s",
    )
    tally = Tally()
    while not timed.done:
        before = tally.prompts
        for prompt in timed:
            generate(pipe, prompt, settings, tally)
        if tally.prompts == before:
            raise SystemExit(f"llama: no prompt in {used[WIKITEXT]} passes upstream's filter")
    new_per_prompt = tally.new_tokens / max(tally.prompts, 1)
    print(
        f"llama: {tally.prompts} prompts, {tally.prompt_tokens} prompt tokens + "
        f"{tally.characters} returned characters; {tally.new_tokens} new tokens "
        f"({new_per_prompt:.1f} per prompt, longest {tally.longest}, "
        f"at most {args.new_tokens})",
        flush=True,
    )


def run_stand_in(
    args: argparse.Namespace, device: torch.device, used: dict[str, Path | None]
) -> None:
    """The stand-in: random weights of ``--size``, random prompts, generated tokens/s."""
    dtype = DTYPES[args.dtype]
    model, config = make_model(args.size, dtype, device)
    n_params = sum(p.numel() for p in model.parameters())
    decoding = f"top-k {args.top_k} sampling" if args.top_k else "greedy"
    print(
        f"llama: STAND-IN (upstream's inputs not prepared): {args.size} "
        f"({n_params / 1e9:.2f}B parameters), random weights, batch {args.batch_size}, "
        f"prompt {args.prompt_len} random ids + {args.new_tokens} new tokens, {decoding}, "
        f"{args.dtype} on {device}, {torch.get_num_threads()} threads",
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
    announce(used, args.new_tokens)

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
