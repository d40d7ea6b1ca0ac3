"""Training steps of transformers encoder-decoder and long-sequence models (T5, Reformer,
Whisper) with random weights, on synthetic inputs.

The standard suite's t5, reformer and whisper entries (upstream names). Models come from
a transformers configuration object with a published model's shape (no download):

* ``T5``: t5-large (d_model 1024, 24 + 24 layers, 16 heads, d_ff 4096, vocabulary 32128),
  denoising-style seq2seq: 512 input tokens, 512 target tokens;
* ``Reformer``: transformers' default ReformerConfig (hidden 256, 6 layers alternating
  local and LSH attention, axial position embeddings 64 x 64 = 4096 tokens, vocabulary
  320): causal language modelling over 4096-token sequences, where LSH attention is the
  point of the model;
* ``Whisper``: whisper-small (d_model 768, 12 + 12 layers, 12 heads, 80 mel bins, 3000
  frames = 30 s of audio, vocabulary 51865): log-mel features in, 128 target tokens.

Throughput: sequences (or audio clips) per second. ``--size tiny`` shrinks every model to
a few layers of width 64 for CPU smoke runs. Runs by hand: ``python main.py --model T5
--size tiny``.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from benchkit.flops import count_and_declare
from benchkit.timing import TimedIterator
from benchkit.torchsetup import PRECISIONS, add_common_arguments, optimizer_step, setup

MODELS = ("T5", "Reformer", "Whisper")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--size", choices=["full", "tiny"], default="full")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=None, help="default: the model's")
    parser.add_argument("--target-len", type=int, default=None, help="seq2seq targets")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument(
        "--num-workers", type=int, default=0, help="accepted for upstream suites (no loader)"
    )
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"])
    return parser.parse_args(argv)


# -- models ------------------------------------------------------------------------------


def t5(tiny: bool) -> tuple[Any, dict]:
    from transformers import T5Config, T5ForConditionalGeneration

    if tiny:
        shape = dict(d_model=64, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=2)
        config = T5Config(vocab_size=512, d_kv=32, decoder_start_token_id=0, **shape)
        return T5ForConditionalGeneration(config), {"seq": 64, "target": 32, "vocab": 512}
    config = T5Config(
        vocab_size=32128,
        d_model=1024,
        d_kv=64,
        d_ff=4096,
        num_layers=24,
        num_decoder_layers=24,
        num_heads=16,
        decoder_start_token_id=0,  # t5's: the pad token starts the decoder
    )
    return T5ForConditionalGeneration(config), {"seq": 512, "target": 512, "vocab": 32128}


def reformer(tiny: bool) -> tuple[Any, dict]:
    from transformers import ReformerConfig, ReformerModelWithLMHead

    if tiny:
        config = ReformerConfig(
            vocab_size=128,
            hidden_size=64,
            feed_forward_size=128,
            num_attention_heads=2,
            attention_head_size=32,
            attn_layers=["local", "lsh"],
            axial_pos_shape=[8, 16],  # 128 tokens
            axial_pos_embds_dim=[16, 48],
            local_attn_chunk_length=16,
            lsh_attn_chunk_length=16,
            num_buckets=4,
            is_decoder=True,
        )
        return ReformerModelWithLMHead(config), {"seq": 128, "vocab": 128}
    config = ReformerConfig(is_decoder=True)  # the library's default shape, 4096 tokens
    seq = config.axial_pos_shape[0] * config.axial_pos_shape[1]
    return ReformerModelWithLMHead(config), {"seq": seq, "vocab": config.vocab_size}


def whisper(tiny: bool) -> tuple[Any, dict]:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    if tiny:
        config = WhisperConfig(
            vocab_size=512,
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            max_source_positions=100,  # 200 mel frames
            max_target_positions=64,
            num_mel_bins=80,
            pad_token_id=0,  # the special tokens' defaults are ids of the full vocabulary
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=3,
        )
        return WhisperForConditionalGeneration(config), {"frames": 200, "target": 32, "vocab": 512}
    config = WhisperConfig(
        vocab_size=51865,
        d_model=768,
        encoder_layers=12,
        decoder_layers=12,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        max_source_positions=1500,  # 3000 mel frames: 30 s of audio
        max_target_positions=448,
        num_mel_bins=80,
    )
    model = WhisperForConditionalGeneration(config)
    return model, {"frames": 3000, "target": 128, "vocab": 51865}


FACTORIES: dict[str, Callable[[bool], tuple[Any, dict]]] = {
    "T5": t5,
    "Reformer": reformer,
    "Whisper": whisper,
}


# -- synthetic batches -------------------------------------------------------------------


def batches(
    args: argparse.Namespace, shape: dict, device: torch.device
) -> Iterator[dict[str, torch.Tensor]]:
    """Endless batches (a pool of 4, made once on the device): the model's keyword inputs."""
    gen = torch.Generator().manual_seed(args.seed)
    b = args.batch_size
    pool = []
    for _ in range(4):
        if args.model == "Whisper":
            target = args.target_len or shape["target"]
            batch = {
                "input_features": torch.randn(b, 80, shape["frames"], generator=gen),
                "labels": torch.randint(0, shape["vocab"], (b, target), generator=gen),
            }
        elif args.model == "T5":
            seq, target = args.seq_len or shape["seq"], args.target_len or shape["target"]
            batch = {
                "input_ids": torch.randint(0, shape["vocab"], (b, seq), generator=gen),
                "labels": torch.randint(0, shape["vocab"], (b, target), generator=gen),
            }
        else:  # Reformer: causal LM over the axial length
            ids = torch.randint(0, shape["vocab"], (b, shape["seq"]), generator=gen)
            batch = {"input_ids": ids, "labels": ids}
        pool.append({k: v.to(device) for k, v in batch.items()})
    return itertools.cycle(pool)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args)
    device = run.device
    model, shape = FACTORIES[args.model](args.size == "tiny")
    if args.model == "Reformer" and args.seq_len not in (None, shape["seq"]):
        raise SystemExit(
            f"--seq-len {args.seq_len}: Reformer trains on its axial length ({shape['seq']})"
        )
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = run.grad_scaler()
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"huggingface: {args.model} {args.size} ({n_params / 1e6:.1f}M parameters), batch "
        f"{args.batch_size}, {args.precision} on {device}, {torch.get_num_threads()} threads",
        flush=True,
    )

    source = batches(args, shape, device)
    first = next(source)

    def one_step() -> None:
        with run.autocast():
            model(**first).loss.backward()

    # One counted forward + backward (items: sequences / clips): TFLOPS and MFU.
    count_and_declare(one_step, args.batch_size, precision=args.precision)
    model.zero_grad(set_to_none=True)

    timed = TimedIterator(source, batch_size=args.batch_size, device=device)
    for batch in timed:
        with run.autocast():
            loss = model(**batch).loss
        optimizer_step(loss, opt, scaler)
        timed.record_loss(loss)


if __name__ == "__main__":
    main()
