"""The small CNN of McMahan et al. (FedAvg), scaled to the input (``docs/trainer.md``, "Models").

Two 5x5 convolutions (32 and 64 channels, "same" padding, each followed by ReLU and 2x2
max pooling), a 512-unit ReLU layer and a linear output. The first dense layer's width
follows from the input: ``64 * floor(H/4) * floor(W/4)`` (3136 for 28x28 MNIST, 256 for
the 8x8 digits). Inputs need ``H, W >= 4``.
"""

from __future__ import annotations

import torch
from torch import nn


class CNN(nn.Module):
    def __init__(
        self,
        input_shape: tuple[int, int, int],
        num_classes: int,
        channels: tuple[int, int] = (32, 64),
        hidden: int = 512,
    ) -> None:
        super().__init__()
        in_channels, height, width = input_shape
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, channels[0], kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels[0], channels[1], kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.classifier = nn.Sequential(
            nn.Linear(channels[1] * (height // 4) * (width // 4), hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))
