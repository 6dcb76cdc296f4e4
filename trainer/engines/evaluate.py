"""Test loss and accuracy of a parameter vector (``docs/trainer.md``, "Evaluation")."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from trainer.engines.params import unflatten_params


def evaluate(
    model: nn.Module,
    params: torch.Tensor | Mapping[str, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    *,
    batch_size: int = 1024,
) -> dict[str, float]:
    """``{"loss": mean cross-entropy, "accuracy": fraction of argmax hits}`` over ``test``.

    ``params`` is a flat ``[d]`` vector or a name -> tensor mapping; the computation runs on
    its device and dtype, ``batch_size`` rows at a time.
    """
    named = unflatten_params(params, model) if isinstance(params, torch.Tensor) else dict(params)
    first = next(iter(named.values()))
    x_all, y_all = test
    count = int(y_all.shape[0])
    if count == 0:
        raise ValueError("the test set is empty")
    total_loss = torch.zeros((), dtype=torch.float64, device=first.device)
    correct = torch.zeros((), dtype=torch.int64, device=first.device)
    with torch.no_grad():
        for start in range(0, count, batch_size):
            x = x_all[start : start + batch_size]
            if x.is_floating_point():
                x = x.to(first.dtype)
            x = x.to(first.device)
            y = y_all[start : start + batch_size].to(first.device)
            logits = functional_call(model, named, (x,))
            total_loss += F.cross_entropy(logits, y, reduction="sum").to(torch.float64)
            correct += (logits.argmax(dim=-1) == y).sum()
    return {"loss": float(total_loss) / count, "accuracy": int(correct) / count}
