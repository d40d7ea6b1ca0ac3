"""benchshared.vision at tiny sizes on CPU: the JPEG folder loader (crops, flips, the
workers' normalisation, timm's augmentations), the ``-noio`` synthetic batch, the
plain-torch ResNet, and one-line errors for a missing folder or an unimportable library.
The benchmarks that use it (torchvision, Lightning) run in tests/benchmarks/test_vision.py."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory) -> str:
    """4 classes x 8 JPEGs of 48 px, made as the torchvision entries' prepare.py makes them
    (uniform random bytes, quality 75)."""
    from benchshared.datasets import make_image_folder

    root = tmp_path_factory.mktemp("jpegs") / "FakeImageNet"
    make_image_folder(root, 4, 8, 48, noise=True, quality=75, verbose=False)
    return str(root)


def test_jpeg_folder_crops_and_flips(jpegs):
    import torch

    from benchshared.vision import JpegFolder, normalise

    folder = JpegFolder(jpegs, 24)
    assert len(folder) == 32 and folder.num_classes == 4
    image, label = folder[5]
    assert image.shape == (3, 24, 24) and image.dtype == torch.uint8 and 0 <= label < 4
    out = normalise(image[None])
    assert out.dtype == torch.float32 and abs(float(out.mean())) < 3


def test_workers_normalise_as_torchvision_does(jpegs):
    """``normalise``: float32 CHW out of the worker, ``ToTensor`` + ``Normalize`` with the
    ImageNet mean and std (upstream's loader), the same crop as the uint8 path."""
    import torch

    from benchshared.vision import MEAN, STD, JpegFolder

    torch.manual_seed(3)
    raw, label = JpegFolder(jpegs, 24)[7]
    torch.manual_seed(3)
    out, same_label = JpegFolder(jpegs, 24, normalise=True)[7]
    assert out.dtype == torch.float32 and out.shape == (3, 24, 24) and out.is_contiguous()
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    assert torch.allclose(out, (raw.float() / 255 - mean) / std, atol=1e-6)
    assert same_label == label


def test_timm_augmentations(jpegs, monkeypatch):
    """focalnet's loader (timm's train.py defaults): the crop resampled with bilinear or
    bicubic filtering drawn per image, and colour jitter 0.4 (brightness, contrast,
    saturation, no hue) after the flip."""
    import random

    import torch
    from PIL import Image

    from benchshared.vision import JpegFolder, jitter_colours

    filters = []
    resize = Image.Image.resize

    def spy(self, size, resample=None, box=None, reducing_gap=None):
        filters.append(resample)
        return resize(self, size, resample, box, reducing_gap)

    monkeypatch.setattr(Image.Image, "resize", spy)
    torch.manual_seed(0)
    folder = JpegFolder(jpegs, 24, color_jitter=0.4, random_interpolation=True)
    for index in range(24):
        folder[index]
    assert set(filters) == {Image.Resampling.BILINEAR, Image.Resampling.BICUBIC}
    filters.clear()
    JpegFolder(jpegs, 24)[0]
    assert filters == [Image.Resampling.BILINEAR]  # torchvision's recipe: bilinear only
    monkeypatch.setattr(Image.Image, "resize", resize)

    # a flat grey image: contrast and saturation leave it as it is, brightness scales it by
    # a factor of [0.6, 1.4]
    grey = Image.new("RGB", (8, 8), (100, 100, 100))
    values = set()
    for seed in range(40):
        out = jitter_colours(grey, 0.4, random.Random(seed))
        pixel = out.getpixel((3, 3))
        assert pixel[0] == pixel[1] == pixel[2] and 60 <= pixel[0] <= 140
        values.add(pixel[0])
    assert len(values) > 10 and min(values) < 80 and max(values) > 120
    colour = Image.new("RGB", (8, 8), (200, 40, 90))
    assert jitter_colours(colour, 0.0, random.Random(1)).getpixel((0, 0)) == (200, 40, 90)


def test_noio_batch_is_upstreams():
    """``-noio`` (upstream's ``synthetic_fixed``): float32 standard-normal images made once
    on the device, targets a [batch, 1000] tensor of uniform random values in [0, 1) given
    to cross_entropy as class probabilities; the same batch every step."""
    import torch
    import torch.nn.functional as F

    from benchshared.vision import synthetic_batches

    batches = synthetic_batches(16, 244, 1000, 0, "cpu", True, normal=True, soft_targets=True)
    images, targets = next(batches)
    assert images.shape == (16, 3, 244, 244) and images.dtype == torch.float32
    assert abs(float(images.mean())) < 0.01 and abs(float(images.std()) - 1) < 0.01
    assert targets.shape == (16, 1000) and targets.dtype == torch.float32
    assert 0 <= float(targets.min()) and float(targets.max()) < 1
    again = next(batches)
    assert again[0] is images and again[1] is targets  # fixed: never copied
    logits = torch.randn(16, 1000)
    expected = -(targets * F.log_softmax(logits, dim=1)).sum(1).mean()
    assert torch.allclose(F.cross_entropy(logits, targets), expected)
    # the default batch, DINOv2's and the smoke tests': uint8 images, class indices
    images, labels = next(synthetic_batches(2, 8, 10, 0, "cpu", True))
    assert images.dtype == torch.uint8 and labels.dtype == torch.long


def test_missing_folder_is_one_line(tmp_path):
    from benchshared.vision import JpegFolder

    with pytest.raises(SystemExit, match="run prepare.py first"):
        JpegFolder(tmp_path / "nothing", 32)


@pytest.mark.parametrize(
    "source, name", [("torchvision", "regnet_y_128gf"), ("timm", "focalnet_base_lrf")]
)
def test_unimportable_library_is_one_line(source, name, monkeypatch):
    from benchshared.vision import build_model

    monkeypatch.setitem(sys.modules, source, None)  # as on a machine where it cannot import
    with pytest.raises(SystemExit, match=f"cannot import {source} here.*--model-source plain"):
        build_model(source, name, 10)


def test_plain_resnet18_has_torchvisions_shape():
    from benchshared.vision import plain_resnet

    model = plain_resnet("resnet18", 1000)
    assert sum(p.numel() for p in model.parameters()) == 11_689_512  # torchvision resnet18
