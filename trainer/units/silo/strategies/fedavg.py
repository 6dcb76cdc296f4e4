"""FedAvg under sample-level DP: every silo starts from the global model; the global
model is what each silo is evaluated with (docs/mrmtl.md §5)."""

from __future__ import annotations

import torch

from trainer.strategies.base import RoundContext
from trainer.units.silo.strategies.base import SiloStrategy


class FedAvg(SiloStrategy):
    name = "fedavg"

    def run_round(self, ctx: RoundContext, global_params: torch.Tensor) -> torch.Tensor:
        start = global_params.expand(self.engine.num_silos, -1)
        return self.mean(self.engine.train(ctx, start))

    def evaluated_models(self, global_params: torch.Tensor) -> torch.Tensor:
        return global_params.expand(self.engine.num_silos, -1)
