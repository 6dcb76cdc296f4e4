"""Local training: every silo runs DP-SGD on its own model, nothing is shared (docs/mrmtl.md §5)."""

from __future__ import annotations

import torch

from trainer.strategies.base import RoundContext
from trainer.units.silo.strategies.base import SiloStrategy


class Local(SiloStrategy):
    name = "local"

    def run_round(self, ctx: RoundContext, global_params: torch.Tensor) -> torch.Tensor:
        self.personal = self.engine.train(ctx, self.personal)
        return self.mean(self.personal)  # reported only; no silo reads it
