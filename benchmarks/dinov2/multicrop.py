"""DINOv2's data pipeline, run in the DataLoader workers as upstream runs it: the
multi-crop augmentation of each image and the collate that stacks the crops, casts them
to fp16 and draws the iBOT block masks.

What DINOv2 does (``dinov2/data/augmentations.py``, ``transforms.py``, ``collate.py``,
``masking.py``), here with Pillow and torch (torchvision cannot be imported next to every
torch build: `benchshared.vision`):

* 2 global crops: random resized crop to 224 px of 32-100% of the image (ratio 3/4-4/3,
  bicubic), flip; colour jitter (brightness 0.4, contrast 0.4, saturation 0.2, hue 0.1,
  in a random order) with probability 0.8, greyscale 0.2; Gaussian blur (kernel 9,
  sigma 0.1-2) and, on the second crop, solarisation (threshold 128) with probability
  0.2; ToTensor and ImageNet normalisation. DINOv2's ``GaussianBlur(p)`` hands
  ``RandomApply`` the probability ``1 - p``, so the blur it applies has probability 0 on
  the first global crop (``p=1.0``), 0.9 on the second (``p=0.1``) and 0.5 on the local
  crops: what upstream runs, and what this does.
* 8 local crops: 5-32% of the image to 98 px, the same jitter, blur 0.5.
* collate: global crops stacked crop-major (every image's first crop, then every
  image's second), local crops likewise, both cast to fp16; half of the global crops
  (``mask_sample_probability`` 0.5) get a block mask (`MaskingGenerator`) covering a
  share of their patches drawn from consecutive slices of [0.1, 0.5], the others none,
  shuffled; the flat indices of the masked patches, their loss weights, and
  ``upperbound`` (the buffer size the iBOT heads run on).
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch
import torch.nn.functional as F

from benchshared.vision import MEAN, STD, JpegFolder


def resized_crop_box(
    width: int, height: int, scale: tuple[float, float], rng: random.Random
) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params`` (ratio 3/4-4/3): the box
    ``(left, top, right, bottom)`` of an area share drawn from ``scale``, central
    fallback after 10 tries."""
    area = width * height
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        ratio = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * ratio)))
        h = int(round(math.sqrt(target / ratio)))
        if 0 < w <= width and 0 < h <= height:
            top, left = rng.randint(0, height - h), rng.randint(0, width - w)
            return left, top, left + w, top + h
    ratio = width / height
    if ratio < 3 / 4:
        w, h = width, int(round(width / (3 / 4)))
    elif ratio > 4 / 3:
        w, h = int(round(height * 4 / 3)), height
    else:
        w, h = width, height
    top, left = (height - h) // 2, (width - w) // 2
    return left, top, left + w, top + h


def jitter(img: Any, rng: random.Random) -> Any:
    """torchvision's ``ColorJitter(0.4, 0.4, 0.2, 0.1)`` on a PIL image: brightness,
    contrast, saturation and hue adjusted in a random order (hue: the H channel of HSV
    shifted, as torchvision's PIL back-end does)."""
    from PIL import Image, ImageEnhance

    b, c, s = rng.uniform(0.6, 1.4), rng.uniform(0.6, 1.4), rng.uniform(0.8, 1.2)
    hue = rng.uniform(-0.1, 0.1)
    for op in rng.sample(range(4), 4):
        if op == 0:
            img = ImageEnhance.Brightness(img).enhance(b)
        elif op == 1:
            img = ImageEnhance.Contrast(img).enhance(c)
        elif op == 2:
            img = ImageEnhance.Color(img).enhance(s)
        else:
            h, sat, val = img.convert("HSV").split()
            shift = int(hue * 255) % 256
            h = h.point(lambda v, shift=shift: (v + shift) % 256)
            img = Image.merge("HSV", (h, sat, val)).convert("RGB")
    return img


def gaussian_blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    """torchvision's ``gaussian_blur`` of a uint8 CHW image (kernel 9: a 9 x 9 kernel,
    reflect padding, float convolution rounded back to uint8)."""
    x = torch.linspace(-4, 4, 9)
    k1 = torch.exp(-0.5 * (x / sigma) ** 2)
    k1 = k1 / k1.sum()
    kernel = (k1[:, None] * k1[None, :]).expand(image.shape[0], 1, 9, 9)
    padded = F.pad(image.float()[None], (4, 4, 4, 4), mode="reflect")
    out = F.conv2d(padded, kernel, groups=image.shape[0])[0]
    return out.round_().clamp_(0, 255).to(torch.uint8)


def to_normalised(image: torch.Tensor) -> torch.Tensor:
    """uint8 CHW -> float32 CHW normalised with the ImageNet mean and std (``ToTensor`` +
    ``Normalize``)."""
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return image.float().div_(255).sub_(mean).div_(std)


def augment_crop(
    img: Any,
    size: int,
    scale: tuple[float, float],
    blur: float,
    solarize: float,
    rng: random.Random,
) -> torch.Tensor:
    """One crop of DINOv2's recipe (module docstring): geometric, colour, blur with
    probability ``blur``, solarisation with probability ``solarize``, normalised."""
    from PIL import Image

    box = resized_crop_box(img.width, img.height, scale, rng)
    crop = img.resize((size, size), Image.Resampling.BICUBIC, box=box)
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    if rng.random() < 0.8:
        crop = jitter(crop, rng)
    if rng.random() < 0.2:
        crop = crop.convert("L").convert("RGB")
    chw = torch.frombuffer(bytearray(crop.tobytes()), dtype=torch.uint8)
    chw = chw.view(size, size, 3).permute(2, 0, 1).contiguous()
    if rng.random() < blur:
        chw = gaussian_blur(chw, rng.uniform(0.1, 2.0))
    if rng.random() < solarize:
        chw = torch.where(chw >= 128, 255 - chw, chw)
    return to_normalised(chw)


class MultiCropFolder(JpegFolder):
    """The JPEG folder's images, each turned into DINOv2's 2 global and ``local_crops``
    local crops (`augment_crop`): ``(global [2, 3, G, G], local [L, 3, l, l])``."""

    def __init__(self, root: Any, args: Any) -> None:
        super().__init__(root, args.global_size)
        self.global_size, self.local_size = args.global_size, args.local_size
        self.local_crops = args.local_crops

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        from PIL import Image

        rng = random.Random(torch.randint(0, 2**31, ()).item())  # seeded per worker by torch
        with Image.open(self.samples[index][0]) as img:
            img = img.convert("RGB")
            g = self.global_size
            first = augment_crop(img, g, (0.32, 1.0), 0.0, 0.0, rng)
            second = augment_crop(img, g, (0.32, 1.0), 0.9, 0.2, rng)
            local = [
                augment_crop(img, self.local_size, (0.05, 0.32), 0.5, 0.0, rng)
                for _ in range(self.local_crops)
            ]
        return torch.stack([first, second]), torch.stack(local)


class SyntheticCrops(torch.utils.data.Dataset):
    """``--synthetic-data``: standard-normal crops of the same shapes (no JPEG)."""

    def __init__(self, args: Any, length: int = 4096) -> None:
        self.args, self.length = args, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.args
        return (
            torch.randn(2, 3, a.global_size, a.global_size),
            torch.randn(a.local_crops, 3, a.local_size, a.local_size),
        )


class MaskingGenerator:
    """DINOv2's iBOT block masks (``dinov2/data/masking.py``) on a ``side`` x ``side``
    patch grid: rectangles of at least 4 patches, aspect 0.3-3.3, added until the
    requested count is reached (at most half the grid per rectangle)."""

    def __init__(self, side: int) -> None:
        self.side = side
        self.max_patches = 0.5 * side * side
        self.log_aspect = (math.log(0.3), math.log(1 / 0.3))

    def _mask(self, mask: torch.Tensor, max_patches: float) -> int:
        delta = 0
        for _ in range(10):
            target = random.uniform(4, max_patches)
            aspect = math.exp(random.uniform(*self.log_aspect))
            h = int(round(math.sqrt(target * aspect)))
            w = int(round(math.sqrt(target / aspect)))
            if w < self.side and h < self.side:
                top = random.randint(0, self.side - h)
                left = random.randint(0, self.side - w)
                block = mask[top : top + h, left : left + w]
                masked = int(block.sum())
                if 0 < h * w - masked <= max_patches:
                    delta += h * w - masked
                    block.fill_(True)
                if delta > 0:
                    break
        return delta

    def __call__(self, count: int = 0) -> torch.Tensor:
        mask = torch.zeros(self.side, self.side, dtype=torch.bool)
        done = 0
        while done < count:
            delta = self._mask(mask, min(count - done, self.max_patches))
            if delta == 0:
                break
            done += delta
        return mask


def upperbound(global_crops: int, tokens: int, probability: float, ratio: tuple) -> int:
    """The size of the buffer the iBOT heads run on (``collate_data_and_cast``): for each
    masked crop, the largest share its slice of ``ratio`` allows."""
    masked = int(global_crops * probability)
    probs = torch.linspace(*ratio, masked + 1)
    return sum(int(tokens * probs[i + 1]) for i in range(masked))


class Collate:
    """DINOv2's ``collate_data_and_cast`` (module docstring), in the workers."""

    def __init__(self, args: Any) -> None:
        self.side = args.global_size // args.patch
        self.tokens = self.side * self.side
        self.probability = args.mask_probability
        self.ratio = tuple(args.mask_ratio)
        self.generator = MaskingGenerator(self.side)

    def __call__(self, samples: list) -> dict[str, Any]:
        glob = torch.stack([s[0][i] for i in range(2) for s in samples]).half()
        local = torch.stack([s[1][i] for i in range(len(samples[0][1])) for s in samples]).half()
        b = len(glob)
        masked = int(b * self.probability)
        probs = torch.linspace(*self.ratio, masked + 1)
        masks = []
        for i in range(masked):
            share = random.uniform(float(probs[i]), float(probs[i + 1]))
            masks.append(self.generator(int(self.tokens * share)))
        masks += [self.generator(0) for _ in range(masked, b)]
        random.shuffle(masks)
        masks = torch.stack(masks).flatten(1)
        weights = (1 / masks.sum(-1).clamp(min=1.0)).unsqueeze(-1).expand_as(masks)[masks]
        index = masks.flatten().nonzero().flatten()
        return {
            "global": glob,
            "local": local,
            "masks": masks,
            "mask_index": index,
            "masks_weight": weights,
            "upperbound": upperbound(b, self.tokens, self.probability, self.ratio),
            "n_masked": torch.full((1,), index.shape[0], dtype=torch.long),
        }
