"""`benchshared.vision.classifier_footprint` of a model whose builder reads the tensors it
computes (torchvision's RegNets: ``torch.pow(...).int().tolist()`` for the block widths),
which cannot run on the meta device: the model is built on the host and moved there, and
the estimate is the one of the same model built on the meta device directly (before:
regnet_y_128gf's estimate failed with ``NotImplementedError: Cannot copy out of meta
tensor; no data!``, which would have ended its run on a GPU)."""

from __future__ import annotations

import argparse

import pytest

torch = pytest.importorskip("torch")


def args(**over) -> argparse.Namespace:
    base = dict(model_source="plain", model="resnet-tiny", classes=10, batch_size=4,
                image_size=32, precision="bf16", momentum=0.0)  # fmt: skip
    return argparse.Namespace(**{**base, **over})


def test_a_builder_that_reads_tensors_is_estimated_from_the_host(monkeypatch):
    from benchshared import vision

    direct = vision.classifier_footprint(args(), 1, 1)
    plain = vision.build_model
    devices = []

    def reads_tensors(source, name, classes):
        widths = torch.arange(4).tolist()  # fails under torch.device("meta")
        model = plain(source, name, classes)
        devices.append(next(model.parameters()).device.type)
        assert widths == [0, 1, 2, 3]
        return model

    monkeypatch.setattr(vision, "build_model", reads_tensors)
    assert vision.classifier_footprint(args(), 1, 1) == direct
    assert devices == ["cpu"]  # the meta attempt failed before building anything


def test_other_errors_of_a_builder_are_not_hidden(monkeypatch):
    from benchshared import vision

    def broken(source, name, classes):
        raise NotImplementedError("this layer has no implementation")

    monkeypatch.setattr(vision, "build_model", broken)
    with pytest.raises(NotImplementedError, match="no implementation"):
        vision.classifier_footprint(args(), 1, 1)
