"""A scalar mean: the model of the mean-estimation toy (docs/mrmtl.md §7)."""

from __future__ import annotations

import torch
from torch import nn


class ScalarMean(nn.Module):
    """One parameter ``w``; predicts ``w`` for every input (its loss ``(w - x)^2 / 2``)."""

    def __init__(self) -> None:
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mean.expand(x.shape[0], 1)
