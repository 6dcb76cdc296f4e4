"""MR-MTL: mean-regularised multi-task learning (docs/mrmtl.md §5; the paper's Algorithm A1, reconstructed).

Each silo keeps a personal model w_k and runs DP-SGD on its loss plus
``lambda/2 ||w_k - w-bar||^2`` towards the server mean w-bar of the last round; the
server's next mean is ``sum_k a_k w_k``. lambda = 0 is local training (same privacy
cost); large lambda approaches FedAvg.
"""

from __future__ import annotations

from typing import Any

import torch

from trainer.strategies.base import RoundContext
from trainer.units.silo.dpsgd import DpSgdEngine
from trainer.units.silo.strategies.base import SiloStrategy


class MRMTL(SiloStrategy):
    name = "mrmtl"
    option_names = ("weighting", "prox")

    def __init__(self, engine: DpSgdEngine, initial: torch.Tensor, rounds: int, **options: Any) -> None:
        super().__init__(engine, initial, rounds, **options)
        self.prox = self.option(options, "prox", 1.0)

    def run_round(self, ctx: RoundContext, global_params: torch.Tensor) -> torch.Tensor:
        self.personal = self.engine.train(ctx, self.personal, anchor=global_params, prox=self.prox)
        return self.mean(self.personal)
