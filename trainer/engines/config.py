"""Local training hyper-parameters (``docs/trainer.md``, "Local training engines")."""

from __future__ import annotations

import math
from dataclasses import dataclass

from accounting.errors import InvalidInputError


@dataclass(frozen=True)
class LocalTrainingConfig:
    """``local_steps`` SGD steps on minibatches of ``batch_size``.

    The step is PyTorch's SGD (no dampening, no Nesterov): ``g = grad + weight_decay * w``,
    ``b = momentum * b + g`` (``b`` starts at zero), ``w = w - lr * b``. Momentum restarts at
    every round, as each client starts from the global model.
    """

    local_steps: int
    batch_size: int
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if self.local_steps < 1:
            raise InvalidInputError("local_steps", f"must be at least 1, got {self.local_steps}")
        if self.batch_size < 1:
            raise InvalidInputError("batch_size", f"must be at least 1, got {self.batch_size}")
        if not math.isfinite(self.lr) or self.lr <= 0:
            raise InvalidInputError("lr", f"must be a positive number, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise InvalidInputError("momentum", f"must be in [0, 1), got {self.momentum}")
        if not math.isfinite(self.weight_decay) or self.weight_decay < 0:
            raise InvalidInputError(
                "weight_decay", f"must be a non-negative number, got {self.weight_decay}"
            )
