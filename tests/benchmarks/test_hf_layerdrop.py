"""The T5/Reformer/Whisper estimate (benchmarks/huggingface/footprint.py) under the GPU
image's transformers 5.17: its Whisper draws LayerDrop's ``torch.rand([]) <
layerdrop`` in training whatever the probability, which tensors without data cannot
decide (``DataDependentOutputException``). With LayerDrop and dropout at 0 (whisper-tiny's)
the encoder and decoder themselves are measured in eval mode, their layers in training."""

from __future__ import annotations

from pathlib import Path

import pytest
from needs import needs

from benchkit.memory import load_footprint, sibling_main

needs("transformers")
torch = pytest.importorskip("torch")

FOLDER = Path(__file__).resolve().parents[2] / "benchmarks" / "huggingface"


def test_whisper_stacks_skip_the_draw_and_their_layers_still_train():
    footprint = load_footprint(FOLDER)
    bench = sibling_main(footprint.__file__)
    with torch.device("meta"):
        model, _ = bench.FACTORIES["Whisper"](True)
    model.train()
    footprint.skip_layerdrop_draw(model)
    stacks = [m for m in model.modules() if hasattr(m, "layerdrop")]
    assert stacks and all(not m.training for m in stacks)
    layers = [layer for m in stacks for layer in m.layers]
    assert layers and all(m.training for layer in layers for m in layer.modules())
    assert model.training and model.classifier.training


def test_a_stack_that_drops_layers_or_has_dropout_is_left_training():
    footprint = load_footprint(FOLDER)

    class Stack(torch.nn.Module):
        def __init__(self, layerdrop, dropout):
            super().__init__()
            self.layerdrop, self.dropout = layerdrop, dropout

    model = torch.nn.Sequential(Stack(0.1, 0.0), Stack(0.0, 0.1), Stack(0.0, 0.0)).train()
    footprint.skip_layerdrop_draw(model)
    assert [m.training for m in model] == [True, True, False]
