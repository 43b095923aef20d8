"""A small CNN of one's own, written as people write them, for `space.model: examples/my_cnn.py:my_cnn`
(README "Your network", docs/extending.md): a Hardswish stem, residual stages of grouped bottlenecks with
squeeze-and-excitation, and a custom head (a 1×1 SiLU convolution, dropout, a linear classifier).

    aows space --model examples/my_cnn.py:my_cnn --input 1,28,28     # what aows will search
"""

from __future__ import annotations

import torch
from torch import nn


class SqueezeExcite(nn.Module):
    """Channel attention: the channels rescaled by a gate computed from their global average."""

    def __init__(self, c: int, squeeze: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(c, squeeze, 1)
        self.relu = nn.ReLU(inplace=True)
        self.expand = nn.Conv2d(squeeze, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.expand(self.relu(self.reduce(self.pool(x)))))


class Bottleneck(nn.Module):
    """1×1 reduce, 3×3 grouped convolution (groups of `group_width` channels), squeeze-and-excitation, 1×1 expand,
    and a residual sum (a strided 1×1 projection when the shape changes), ReLU after it."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1, group_width: int = 8):
        super().__init__()
        mid = c_out
        self.reduce = nn.Sequential(nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True))
        self.grouped = nn.Sequential(nn.Conv2d(mid, mid, 3, stride, 1, groups=mid // group_width, bias=False),
                                     nn.BatchNorm2d(mid), nn.ReLU(inplace=True))
        self.se = SqueezeExcite(mid, max(4, c_in // 4))
        self.expand = nn.Sequential(nn.Conv2d(mid, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.shortcut = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.expand(self.se(self.grouped(self.reduce(x))))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class MyCNN(nn.Module):
    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                  nn.Hardswish())
        self.stage1 = nn.Sequential(Bottleneck(width, 2 * width, 2), Bottleneck(2 * width, 2 * width))
        self.stage2 = nn.Sequential(Bottleneck(2 * width, 4 * width, 2), Bottleneck(4 * width, 4 * width))
        self.head = nn.Sequential(nn.Conv2d(4 * width, 8 * width, 1, bias=False), nn.BatchNorm2d(8 * width),
                                  nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                                  nn.Linear(8 * width, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stage2(self.stage1(self.stem(x))))


def my_cnn(**kwargs) -> nn.Module:
    """MyCNN(in_channels=1, num_classes=10, width=16): Fashion-MNIST's shape by default."""
    return MyCNN(**kwargs)
