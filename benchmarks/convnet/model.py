"""A ResNet-style image classifier in plain torch (no torchvision).

Why not torchvision: the benchmark must run in an environment with nothing but torch,
on any torch build, and its cost must be easy to scale to a 2-core CPU or to a large
GPU. The network is the classic residual design: a stem convolution, four stages of
basic blocks (two 3x3 convolutions with batch norm and an identity or 1x1 shortcut),
global average pooling and a linear classifier. ``width`` and ``blocks`` scale it:
``width=64, blocks=(2, 2, 2, 2)`` is ResNet-18's layout.
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """Two 3x3 convolutions plus a shortcut (1x1 convolution when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        width: int = 32,
        blocks: tuple[int, ...] = (1, 1, 1, 1),
        small_input: bool = True,
    ) -> None:
        super().__init__()
        if small_input:
            # 32-96 px images: one stride-2 3x3 stem, no max-pool.
            self.stem = nn.Sequential(
                nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            )
        else:
            # ImageNet-sized images: the usual 7x7 stride-2 stem and max-pool.
            self.stem = nn.Sequential(
                nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
        layers = []
        cin = width
        for stage, count in enumerate(blocks):
            cout = width * 2**stage
            for i in range(count):
                layers.append(BasicBlock(cin, cout, stride=2 if (i == 0 and stage > 0) else 1))
                cin = cout
        self.stages = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))
