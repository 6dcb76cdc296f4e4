"""The local training loss of a dataset's task (``docs/trainer.md``, "Local step").

``classification`` and ``next_char``: cross-entropy of the logits against class indices;
``regression``: the squared error of the model's single output against a float target
(the metric-privacy synthetic task, docs/metric-privacy.md §6). Both engines and the
per-client evaluation call these, so they train and score the same objective.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def mean_loss(task: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The mean loss over a batch: ``output [B, C]`` (regression: ``[B, 1]``), ``target [B]``."""
    if task == "regression":
        return F.mse_loss(output.reshape(target.shape), target.to(output.dtype))
    return F.cross_entropy(output, target)


def summed_loss(task: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The summed loss over a batch (the same per-row loss as ``mean_loss``)."""
    if task == "regression":
        return F.mse_loss(output.reshape(target.shape), target.to(output.dtype), reduction="sum")
    return F.cross_entropy(output, target, reduction="sum")
