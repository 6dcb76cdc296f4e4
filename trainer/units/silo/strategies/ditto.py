"""Ditto under sample-level DP: a FedAvg pass for the global model and a personal pass with
the prox term towards it, each its own DP-SGD pass (the plan counts two per round,
docs/mrmtl.md §2, §5)."""

from __future__ import annotations

from typing import Any

import torch

from trainer.strategies.base import RoundContext
from trainer.units.silo.dpsgd import DpSgdEngine
from trainer.units.silo.strategies.base import SiloStrategy


class Ditto(SiloStrategy):
    name = "ditto"
    option_names = ("weighting", "prox")

    def __init__(self, engine: DpSgdEngine, initial: torch.Tensor, rounds: int, **options: Any) -> None:
        super().__init__(engine, initial, rounds, **options)
        self.prox = self.option(options, "prox", 1.0)

    def run_round(self, ctx: RoundContext, global_params: torch.Tensor) -> torch.Tensor:
        start = global_params.expand(self.engine.num_silos, -1)
        released = self.engine.train(ctx, start, pass_index=0)
        self.personal = self.engine.train(ctx, self.personal, anchor=global_params, prox=self.prox, pass_index=1)
        return self.mean(released)
