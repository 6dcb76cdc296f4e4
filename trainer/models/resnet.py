"""ResNet-18 with GroupNorm (``docs/trainer.md``, "Models").

He et al.'s ResNet-18 (four stages of two basic blocks, 64-128-256-512 channels by
default, scaled by ``base_width / 64``) with every BatchNorm replaced by GroupNorm
(``min(32, channels // 4)`` groups, Wu & He 2018). BatchNorm's running statistics are buffers
updated in place and mix samples of a batch, which breaks per-client ``vmap`` and
differential privacy; GroupNorm normalises each sample alone and has no buffers. The stem
is the small-image one (a 3x3 convolution, no max pooling), so 8x8 to 32x32 inputs keep
spatial extent through the stages; a global average pool feeds the linear classifier.
"""

from __future__ import annotations

import torch
from torch import nn


def _norm(channels: int) -> nn.GroupNorm:
    # At least four channels per group: a one-channel group on the 1x1 maps of the last
    # stage (small inputs) has zero variance and a gradient scaled by 1/sqrt(eps).
    return nn.GroupNorm(max(1, min(32, channels // 4)), channels)


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.norm2 = _norm(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                _norm(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet18GN(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, base_width: int = 64) -> None:
        super().__init__()
        widths = [base_width, 2 * base_width, 4 * base_width, 8 * base_width]
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False),
            _norm(widths[0]),
            nn.ReLU(),
        )
        blocks: list[nn.Module] = []
        channels = widths[0]
        for stage, width in enumerate(widths):
            stride = 1 if stage == 0 else 2
            blocks += [BasicBlock(channels, width, stride), BasicBlock(width, width, 1)]
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.blocks(self.stem(x))
        return self.head(features.mean(dim=(-2, -1)))
