"""Strategies of the ``silo_sample`` unit: what a cross-silo algorithm decides (docs/mrmtl.md §5).

Every silo takes part in every round. A strategy decides where each silo's DP-SGD starts,
towards which anchor its data-independent prox term pulls (weight ``prox``, lambda), which
of the plan's passes it runs, how the server combines the released models and which
model each silo is evaluated with. It never touches the mechanism: ``DpSgdEngine`` reads
sigma_k, c and q_k from the plan and refuses a pass run twice in a round, so no strategy
can spend more than the plan. What the server does with released models is
post-processing.

State: ``personal`` (``[K, d]``, the silos' own models where the method keeps them) and
whatever a method adds; ``state_dict`` checkpoints it so a resumed run is exact.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Literal

import torch

from accounting.errors import InvalidInputError
from trainer.strategies.base import RoundContext
from trainer.units.silo.dpsgd import DpSgdEngine

Weighting = Literal["uniform", "samples"]


class SiloStrategy(ABC):
    """One cross-silo algorithm. ``options`` are its ``--strategy-option`` values."""

    name: str = ""
    option_names: tuple[str, ...] = ("weighting",)

    def __init__(self, engine: DpSgdEngine, initial: torch.Tensor, rounds: int, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            raise InvalidInputError(
                "strategy-option", f"{self.name} takes no option {unknown[0]!r} (it takes: {', '.join(self.option_names)})"
            )
        self.engine = engine
        self.rounds = rounds
        # the run's first global round: a schedule over the run's ``rounds`` (finetune_fraction,
        # fedavg_fraction) counts from it, and a re-plan the run follows (a new mechanism for
        # the engine, from the re-plan's start) does not restart it (docs/mrmtl.md §6)
        self.first_round = engine.mechanism.start_round
        weighting = options.get("weighting", "uniform")
        if weighting not in ("uniform", "samples"):
            raise InvalidInputError("strategy-option", f"weighting must be 'uniform' or 'samples', got {weighting!r}")
        sizes = torch.tensor(engine.mechanism.num_samples, dtype=initial.dtype, device=initial.device)
        # a_k: the server mean's silo weights (uniform, as the paper's analysis; or by n_k,
        # the reference code's default; n_k is public in the plan)
        self.silo_weights = sizes / sizes.sum() if weighting == "samples" else torch.full_like(sizes, 1 / len(sizes))
        self.personal = initial.expand(engine.num_silos, -1).clone()

    @staticmethod
    def option(options: Mapping[str, Any], name: str, default: float, *, low: float = 0.0, high: float = float("inf")) -> float:
        value = options.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= float(value) <= high:
            raise InvalidInputError("strategy-option", f"{name} must be a number in [{low}, {high}], got {value!r}")
        return float(value)

    def run_round_index(self, ctx: RoundContext) -> int:
        """The round's index within the run (``ctx.round_index`` counts within the plan now
        executed, which a followed re-plan restarts)."""
        return ctx.global_round - self.first_round

    def mean(self, models: torch.Tensor) -> torch.Tensor:
        """The server's mean sum_k a_k w_k of released models ``[K, d]``."""
        return self.silo_weights @ models

    @abstractmethod
    def run_round(self, ctx: RoundContext, global_params: torch.Tensor) -> torch.Tensor:
        """One round: every silo's DP-SGD (through ``self.engine``) and the server's step;
        returns the next global parameters ``[d]``."""

    def evaluated_models(self, global_params: torch.Tensor) -> torch.Tensor:
        """The model each silo is evaluated with, ``[K, d]`` (default: its personal model)."""
        return self.personal

    def state_dict(self) -> dict[str, Any]:
        return {"personal": self.personal.detach().cpu().clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.personal = state["personal"].to(self.personal.device, self.personal.dtype)
