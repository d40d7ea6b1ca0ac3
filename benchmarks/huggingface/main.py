"""Training steps of transformers encoder-decoder and long-sequence models (T5, Reformer,
Whisper) with random weights, on synthetic inputs.

The standard suite's t5, reformer and whisper entries: upstream milabench's workloads
(its ``huggingface`` benchmark, models ``T5``, ``Reformer``, ``Whisper``). Models come
from a transformers configuration object with the published model's shape written out
(no download), random inputs and labels of upstream's shapes:

* ``T5``: ``T5ForConditionalGeneration`` with t5-small's configuration (d_model 512,
  d_kv 64, 6 + 6 layers, 8 heads, d_ff 2048, vocabulary 32128); 1024 random input ids,
  1024 random label ids;
* ``Reformer``: ``ReformerForMaskedLM`` with transformers' default ``ReformerConfig``
  (hidden 256, 6 layers alternating local and LSH attention, axial position embeddings
  64 x 64 = 4096 tokens, vocabulary 320) and 128 hash buckets: bidirectional attention,
  4096 random input ids, independent random labels at every position;
* ``Whisper``: ``WhisperForAudioClassification`` with whisper-tiny's configuration
  (d_model 384, 4 encoder layers, 6 heads, feed-forward 1536, 80 mel bins; the
  classifier: a 256-wide projector, mean pooling, 2 labels; no decoder): 80 x 3000
  log-mel features (30 s of audio) in, one class id per clip.

Every model trains with Adam at lr 1e-3 and never clears its gradients (each backward
adds into the previous ones), as upstream's loop does. Data as upstream serves it:
``batch-size`` samples made once on the host, a DataLoader with ``--num-workers`` workers
repeating them, every batch copied to the device at the start of its step
(`benchkit.synthetic`). Throughput: sequences (or audio clips) per second. ``--size tiny`` shrinks every model to a few layers of width 64 for
CPU smoke runs. Runs by hand: ``python main.py --model T5 --size tiny``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch

from benchkit.exiting import run_and_exit
from benchkit.flops import count_and_declare
from benchkit.memory import check_memory
from benchkit.synthetic import collate, repeated_loader, to_device
from benchkit.timing import TimedIterator
from benchkit.torchsetup import PRECISIONS, add_common_arguments, setup

MODELS = ("T5", "Reformer", "Whisper")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--size", choices=["full", "tiny"], default="full")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=None, help="default: the model's")
    parser.add_argument("--target-len", type=int, default=None, help="T5's targets")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--num-workers", type=int, default=0, help="loader worker processes")
    add_common_arguments(parser, precisions=[*PRECISIONS, "tf32-fp16"])
    return parser.parse_args(argv)


# -- models ------------------------------------------------------------------------------


def t5(tiny: bool) -> tuple[Any, dict]:
    from transformers import T5Config, T5ForConditionalGeneration

    if tiny:
        shape = dict(d_model=64, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=2)
        config = T5Config(vocab_size=512, d_kv=32, decoder_start_token_id=0, **shape)
        return T5ForConditionalGeneration(config), {"seq": 64, "target": 32, "vocab": 512}
    config = T5Config(  # t5-small's configuration (upstream: AutoConfig("t5-small"))
        vocab_size=32128,
        d_model=512,
        d_kv=64,
        d_ff=2048,
        num_layers=6,
        num_decoder_layers=6,
        num_heads=8,
        relative_attention_num_buckets=32,
        dropout_rate=0.1,
        feed_forward_proj="relu",
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,  # t5's: the pad token starts the decoder
    )
    # upstream's train_length: 1024 input ids and 1024 label ids
    return T5ForConditionalGeneration(config), {"seq": 1024, "target": 1024, "vocab": 32128}


def reformer(tiny: bool) -> tuple[Any, dict]:
    from transformers import ReformerConfig, ReformerForMaskedLM

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
        )
        return ReformerForMaskedLM(config), {"seq": 128, "vocab": 128}
    # the library's default shape (4096 tokens), 128 buckets as upstream sets them
    config = ReformerConfig(num_buckets=128)
    seq = config.axial_pos_shape[0] * config.axial_pos_shape[1]
    return ReformerForMaskedLM(config), {"seq": seq, "vocab": config.vocab_size}


def whisper(tiny: bool) -> tuple[Any, dict]:
    from transformers import WhisperConfig, WhisperForAudioClassification

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
            classifier_proj_size=32,
            num_labels=2,
            pad_token_id=0,  # the special tokens' defaults are ids of the full vocabulary
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=3,
        )
        return WhisperForAudioClassification(config), {"frames": 200, "labels": 2}
    config = WhisperConfig(  # whisper-tiny's (upstream: AutoConfig("openai/whisper-tiny"))
        vocab_size=51865,
        d_model=384,
        encoder_layers=4,
        decoder_layers=4,  # no decoder is built for classification
        encoder_attention_heads=6,
        decoder_attention_heads=6,
        encoder_ffn_dim=1536,
        decoder_ffn_dim=1536,
        max_source_positions=1500,  # 3000 mel frames: 30 s of audio
        max_target_positions=448,
        num_mel_bins=80,
        classifier_proj_size=256,
        use_weighted_layer_sum=False,
        num_labels=2,  # the config has no labels: transformers' default of 2
        pad_token_id=50257,
        bos_token_id=50257,
        eos_token_id=50257,
        decoder_start_token_id=50258,
    )
    return WhisperForAudioClassification(config), {"frames": 3000, "labels": 2}


FACTORIES: dict[str, Callable[[bool], tuple[Any, dict]]] = {
    "T5": t5,
    "Reformer": reformer,
    "Whisper": whisper,
}


# -- synthetic samples -------------------------------------------------------------------


def samples(args: argparse.Namespace, shape: dict) -> list[dict[str, torch.Tensor]]:
    """``batch-size`` samples of upstream's shapes, made once on the host (upstream's
    ``SyntheticData``), the model's keyword inputs: ids and labels uniform over the
    vocabulary (T5: inputs and targets; Reformer: labels independent of the inputs, at
    every position), Whisper's log-mel features with one class id per clip."""
    gen = torch.Generator().manual_seed(args.seed)
    vocab = shape.get("vocab", 0)

    def one() -> dict[str, torch.Tensor]:
        if args.model == "Whisper":
            return {
                "input_features": torch.randn(80, shape["frames"], generator=gen),
                "labels": torch.randint(0, shape["labels"], (), generator=gen),
            }
        if args.model == "T5":
            seq, target = args.seq_len or shape["seq"], args.target_len or shape["target"]
            return {
                "input_ids": torch.randint(0, vocab, (seq,), generator=gen),
                "labels": torch.randint(0, vocab, (target,), generator=gen),
            }
        # Reformer: masked LM over the axial length, every position labelled
        return {
            "input_ids": torch.randint(0, vocab, (shape["seq"],), generator=gen),
            "labels": torch.randint(0, vocab, (shape["seq"],), generator=gen),
        }

    return [one() for _ in range(args.batch_size)]


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """Upstream's optimiser: ``optim.Adam`` (no weight decay), lr 1e-3 by default."""
    return torch.optim.Adam(model.parameters(), lr=lr)


def train_step(loss: torch.Tensor, opt: torch.optim.Optimizer, scaler: Any) -> None:
    """Upstream's optimiser step: scaled backward, step, update; the gradients are never
    cleared, so each backward adds into the previous ones (as upstream's Runner.step)."""
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = setup(args)
    device = run.device
    check_memory(__file__, args, device)  # skips, with the numbers, if it cannot fit
    model, shape = FACTORIES[args.model](args.size == "tiny")
    if args.model == "Reformer" and args.seq_len not in (None, shape["seq"]):
        raise SystemExit(
            f"--seq-len {args.seq_len}: Reformer trains on its axial length ({shape['seq']})"
        )
    model.to(device).train()
    opt = make_optimizer(model, args.lr)
    scaler = run.grad_scaler()
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"huggingface: {args.model} {args.size} ({n_params / 1e6:.1f}M parameters), batch "
        f"{args.batch_size}, {args.precision} on {device}, {torch.get_num_threads()} threads",
        flush=True,
    )

    data = samples(args, shape)
    first = to_device(collate(data), device)

    def one_step() -> None:
        with run.autocast():
            model(**first).loss.backward()

    # One counted forward + backward (items: sequences / clips): TFLOPS and MFU.
    count_and_declare(one_step, args.batch_size, precision=args.precision)
    model.zero_grad(set_to_none=True)

    # upstream's loader: the same samples in every batch, --num-workers worker processes,
    # each batch copied to the device at every step
    loader = repeated_loader(data, args.batch_size, args.num_workers)
    timed = TimedIterator(loader, batch_size=args.batch_size, device=device)
    for batch in timed:
        batch = to_device(batch, device)
        with run.autocast():
            loss = model(**batch).loss
        train_step(loss, opt, scaler)
        timed.record_loss(loss)


if __name__ == "__main__":
    run_and_exit(main)
