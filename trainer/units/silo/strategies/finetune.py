"""FedAvg, then local fine-tuning: FedAvg for the first ``finetune_fraction`` of the rounds
(rounded up), then every silo trains its own copy of the final global model
(docs/mrmtl.md §5). One DP-SGD pass per round throughout, so it costs what FedAvg does."""

from __future__ import annotations

import math
from typing import Any

import torch

from trainer.strategies.base import RoundContext
from trainer.units.silo.dpsgd import DpSgdEngine
from trainer.units.silo.strategies.base import SiloStrategy


class Finetune(SiloStrategy):
    name = "finetune"
    option_names = ("weighting", "finetune_fraction")

    def __init__(self, engine: DpSgdEngine, initial: torch.Tensor, rounds: int, **options: Any) -> None:
        super().__init__(engine, initial, rounds, **options)
        fraction = self.option(options, "finetune_fraction", 0.5, high=1.0)
        self.federated_rounds = math.ceil(fraction * rounds - 1e-9)

    def run_round(self, ctx: RoundContext, global_params: torch.Tensor) -> torch.Tensor:
        if self.run_round_index(ctx) < self.federated_rounds:
            models = self.engine.train(ctx, global_params.expand(self.engine.num_silos, -1))
            new_global = self.mean(models)
            self.personal = new_global.expand(self.engine.num_silos, -1).clone()
            return new_global
        self.personal = self.engine.train(ctx, self.personal)
        return global_params
