"""``PlanStrategy``: FedAvg with the plan's sampling rates, keep ratios and fixed denominator.

Executes every method the planner produces (``dp_fedavg``, ``gdpfed``, ``gdpfed_minus``,
``gdpfed_plus``, ``idp_sample``, ``idp_scale``, ``pooled_plus``, ``nonprivate``): they
differ only in the plan's numbers (pools, ``q_g``, ``sigma_P``, ``kappa_P``, clip norms),
never in code (docs/trainer.md §Strategies).

- selection: Poisson(``q_g``) per group from a generator seeded by (seed, round, group);
- client update: ``local_steps`` of SGD from the global model (``trainer.engines``);
- aggregation: ``Delta = (1/K) sum_P top_{k_P}(S_P)`` with ``K`` = the scenario's expected
  clients per round (docs/planning.md §3): a fixed, data-independent
  denominator; an aborted pool adds nothing;
- server step: ``v <- beta v + Delta``, ``w <- w + eta v`` (``beta`` = 0: plain FedAvg);
- option ``adaptive_clip``: the clip follows Andrew et al.'s adaptive clipping with the
  plan's ``adaptive_clip`` block (docs/trainer.md §Adaptive clipping); fixed ``C_g`` by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from pydantic import ConfigDict, Field
from torch import nn

from accounting.validation import InputModel
from planner.schema import Plan
from trainer.engines import train_clients
from trainer.strategies.base import PURPOSE_SAMPLING, Population, RoundContext, Strategy, StrategySpec, poisson_sample
from trainer.units.client.adaptive_clip import AdaptiveClipping
from trainer.units.client.sparsify import top_k

ADAPTIVE_CLIP_DESCRIPTION = (
    "true: clip at S^t, updated from a noisy count of unclipped clients (Andrew et al.; the plan's adaptive_clip "
    "block, docs/trainer.md §Adaptive clipping); false: the plan's fixed clip norms"
)


class PlanOptions(InputModel):
    """``--strategy-option`` values of ``plan`` (docs/trainer.md §Adaptive clipping)."""

    model_config = ConfigDict(extra="forbid")

    adaptive_clip: bool = Field(False, description=ADAPTIVE_CLIP_DESCRIPTION)


class PlanStrategy(Strategy):
    """The plan's own algorithm (see the module docstring)."""

    # Adaptive clipping's controller (S^t), when the strategy runs it: the engine clips at its
    # clip norm and feeds it the released counts (docs/trainer.md §Adaptive clipping). The
    # strategy owns it so that it is checkpointed with the strategy's state.
    adaptive_clip: AdaptiveClipping | None = None

    def __init__(
        self,
        plan: Plan,
        model: nn.Module,
        dataset: Any,
        *,
        engine: str,
        local: Any,
        device: torch.device,
        server_lr: float = 1.0,
        server_momentum: float = 0.0,
        adaptive_clip: bool = False,
    ) -> None:
        if not server_lr > 0:
            raise ValueError(f"server_lr must be positive, got {server_lr}")
        if not 0 <= server_momentum < 1:
            raise ValueError(f"server_momentum must be in [0, 1), got {server_momentum}")
        self.plan = plan
        self.model = model
        self.dataset = dataset
        self.engine = engine
        self.local = local
        self.device = device
        self.server_lr = server_lr
        self.server_momentum = server_momentum
        self.denominator = plan.scenario.participation
        self._momentum: torch.Tensor | None = None
        self.adaptive_clip = AdaptiveClipping.from_plan(plan) if adaptive_clip else None

    def configure_round(self, ctx: RoundContext, population: Population) -> dict[str, np.ndarray]:
        return {
            group.id: poisson_sample(ctx.rng(PURPOSE_SAMPLING, index), population.clients(group.id), group.sampling_rate)
            for index, group in enumerate(self.plan.groups)
        }

    def client_update(
        self, ctx: RoundContext, global_params: torch.Tensor, clients: np.ndarray, groups: list[str]
    ) -> torch.Tensor:
        return train_clients(
            self.engine,  # type: ignore[arg-type]
            self.model,
            global_params,
            self.dataset,
            [int(c) for c in clients],
            self.local,
            seed=ctx.seed,
            round_index=ctx.global_round,
            device=self.device,
        )

    def aggregate(
        self, ctx: RoundContext, pool_sums: Mapping[str, torch.Tensor | None], dim: int
    ) -> torch.Tensor:
        total = torch.zeros(dim, dtype=torch.float64, device=self.device)
        for pool in self.plan.pools:
            pool_sum = pool_sums.get(pool.id)
            if pool_sum is None:
                continue
            total += top_k(pool_sum.to(total), pool.keep_ratio)
        return total / self.denominator

    def server_update(self, ctx: RoundContext, global_params: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
        step = update.to(global_params.dtype)
        if self.server_momentum > 0:
            self._momentum = step if self._momentum is None else self.server_momentum * self._momentum + step
            step = self._momentum
        return global_params + self.server_lr * step

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"momentum": None if self._momentum is None else self._momentum.detach().cpu().clone()}
        if self.adaptive_clip is not None:
            state["adaptive_clip"] = self.adaptive_clip.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        momentum = state.get("momentum")
        self._momentum = None if momentum is None else momentum.to(self.device)
        if self.adaptive_clip is not None and "adaptive_clip" in state:
            self.adaptive_clip.load_state_dict(state["adaptive_clip"])


SPEC = StrategySpec(
    name="plan",
    summary="the plan's own algorithm: Poisson sampling per group, local SGD, top-k per pool, fixed denominator K",
    strategy=PlanStrategy,
    options=PlanOptions,
    privacy_unit="client",
    plan_methods=None,
    default_plan_method="gdpfed_plus",
)
