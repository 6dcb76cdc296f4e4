"""Multilayer perceptron (``docs/trainer.md``, "Models").

The "2NN" of McMahan et al. (FedAvg): the input flattened, two hidden ReLU layers of 200
units (configurable), a linear output over the classes. ``hidden=[]`` with ``bias=False`` is
the bias-free linear model of the metric-privacy synthetic regression.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(
        self, input_features: int, num_classes: int, hidden: Sequence[int] = (200, 200), bias: bool = True
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = input_features
        for units in hidden:
            layers += [nn.Linear(width, units, bias=bias), nn.ReLU()]
            width = units
        layers.append(nn.Linear(width, num_classes, bias=bias))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)
