"""IFCA warm start, then MR-MTL towards the silo's cluster (docs/mrmtl.md §5; the paper's
Appendix D, reconstructed from the reference code).

``clusters`` cluster models start from the initial model plus small seeded
perturbations. In the plan's selection rounds (the first ``warm_start_fraction`` of
them) every silo privately selects the cluster model with the lowest training error
(``DpSgdEngine.select_clusters``: the exponential mechanism, accounted as zCDP), trains
from it, and each cluster model moves to its members' mean. Then assignments freeze:
FedAvg within clusters until ``fedavg_fraction`` of the rounds, then MR-MTL with the
prox term towards the silo's cluster model. The flat "global" vector this strategy
returns is the first cluster's model (reported only); the cluster models are its state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from trainer.strategies.base import RoundContext
from trainer.units.silo.dpsgd import DpSgdEngine
from trainer.units.silo.strategies.base import SiloStrategy


class IfcaMRMTL(SiloStrategy):
    name = "ifca_mrmtl"
    option_names = ("weighting", "prox", "fedavg_fraction", "init_scale")

    def __init__(self, engine: DpSgdEngine, initial: torch.Tensor, rounds: int, **options: Any) -> None:
        super().__init__(engine, initial, rounds, **options)
        self.prox = self.option(options, "prox", 1.0)
        selection = engine.mechanism.selection_rounds
        fraction = self.option(options, "fedavg_fraction", selection / rounds, high=1.0)
        self.fedavg_rounds = max(selection, math.ceil(fraction * rounds - 1e-9))
        scale = self.option(options, "init_scale", 0.1)
        # cluster models: the initial model plus seeded perturbations of relative size init_scale
        generator = torch.Generator().manual_seed(engine.mechanism.clusters)
        noise = torch.randn(engine.mechanism.clusters, initial.numel(), generator=generator, dtype=initial.dtype)
        self.centres = initial[None] + scale * float(initial.std()) * noise.to(initial.device)
        self.assignment = torch.zeros(engine.num_silos, dtype=torch.long, device=initial.device)

    def _cluster_means(self, models: torch.Tensor) -> torch.Tensor:
        centres = self.centres.clone()
        for cluster in range(centres.shape[0]):
            members = self.assignment == cluster
            if bool(members.any()):
                weights = self.silo_weights[members]
                centres[cluster] = (weights / weights.sum()) @ models[members]
        return centres

    def run_round(self, ctx: RoundContext, global_params: torch.Tensor) -> torch.Tensor:
        # selections count within the plan now executed (a re-plan states its remaining ones)
        if ctx.round_index < self.engine.mechanism.selection_rounds:
            chosen = self.engine.select_clusters(ctx, self.personal, self.centres, ctx.round_index)
            self.assignment = torch.as_tensor(chosen, device=self.centres.device)
        anchors = self.centres[self.assignment]
        if self.run_round_index(ctx) < self.fedavg_rounds:
            models = self.engine.train(ctx, anchors)
            self.personal = models
        else:
            models = self.engine.train(ctx, self.personal, anchor=anchors, prox=self.prox)
            self.personal = models
        self.centres = self._cluster_means(models)
        return self.centres[0]

    def evaluated_models(self, global_params: torch.Tensor) -> torch.Tensor:
        if self.fedavg_rounds >= self.rounds:
            return self.centres[self.assignment]
        return self.personal

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "centres": self.centres.detach().cpu().clone(),
                "assignment": self.assignment.detach().cpu().clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.centres = state["centres"].to(self.personal.device, self.personal.dtype)
        self.assignment = state["assignment"].to(self.personal.device)
