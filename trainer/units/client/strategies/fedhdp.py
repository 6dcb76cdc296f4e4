"""FedHDP (and FeO2, its two-level case): per-pool ratios and Ditto personal models.

(docs/trainer.md §FedHDP; the math in docs/planning.md §14.) Selection, local
training of the released update and the privacy mechanism are ``PlanStrategy``'s; two
things differ:

- aggregation with a ratio ``r_P`` in [0, 1] per pool (opted-out pools, whose noise
  multiplier is 0, keep ``r = 1``)::

      Delta = sum_P r_P top_k(S_P) / sum_P r_P K_P

  with ``K_P`` the pool's *expected* clients per round (fixed, data-independent, unlike
  the paper's realised counts, which are themselves private). An aborted pool adds 0 and
  the denominator stays fixed. With every ``r_P = 1`` this is ``PlanStrategy.aggregate``
  exactly (the same code runs). Ratios are post-processing of released sums: the plan's
  privacy numbers do not change.
- Ditto personalisation: every sampled client also trains its own persistent personal
  model ``theta_j`` from its last personal state (the global model it receives, the first
  time) on the same minibatches as its global update, with the gradient of
  ``f_j(theta_j) + (lambda_g / 2) ||theta_j - theta_global||^2``, ``theta_global`` the
  model it received and ``lambda_g`` its group's. Personal models never leave the client,
  so they cost no privacy under client-level DP; they live on the host, are created
  lazily and are checkpointed.

``evaluate`` reports ``personal_accuracy`` (mean over all clients of their personal
model's accuracy on their own test rows; a client never sampled is scored with the
global model) and ``personal_accuracy.<group>``; the run itself reports the global
model's ``accuracy_by_group``. ``adaptive_clip=true`` clips with the paper's adaptive
clipping (Andrew et al.; ``PlanStrategy``'s option, docs/trainer.md §Adaptive clipping);
the default is the plan's fixed ``C_g``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import ConfigDict, Field

from accounting.errors import InvalidInputError, one_error_for_union
from accounting.validation import InputModel
from planner.schema import Plan
from trainer.engines import evaluate_clients, train_clients
from trainer.engines.evaluate import ClientScores
from trainer.strategies.base import Population, RoundContext, StrategySpec
from trainer.units.client.sparsify import top_k
from trainer.units.client.strategies.plan import ADAPTIVE_CLIP_DESCRIPTION, PlanStrategy

DEFAULT_LAMBDA = 0.05
Lambda = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# Personal models scored per evaluation chunk: bounds the [clients, d] block built at once.
EVALUATION_CHUNK = 256


class FedHDPOptions(InputModel):
    """``--strategy-option`` values of ``fedhdp`` (docs/trainer.md §FedHDP)."""

    model_config = ConfigDict(extra="forbid")

    ratios: dict[str, float] = Field(
        default_factory=dict,
        description="pool id -> r_P in [0, 1] for the pools with noise; pools not named keep the plan's predicted r* "
        "(predicted.fedhdp, from the scenario's update_dispersion) or 1; every opted-out pool keeps 1",
    )
    lambdas: Annotated[
        dict[str, Lambda] | Lambda, one_error_for_union("a number >= 0, or a mapping of group id to a number >= 0")
    ] = Field(
        DEFAULT_LAMBDA, description="Ditto's lambda: one number for every group, or group id -> lambda (>= 0)"
    )
    personal_lr: float | None = Field(None, gt=0, description="personal models' step size (default: the run's lr)")
    personalize: bool = Field(True, description="false: no personal models (FedHDP's aggregation only)")
    adaptive_clip: bool = Field(False, description=ADAPTIVE_CLIP_DESCRIPTION)


def pool_ratios(plan: Plan, given: Mapping[str, float]) -> dict[str, float]:
    """Pool id -> ``r_P``: ``given`` for noised pools, 1 elsewhere. An unknown pool, a value
    outside [0, 1], a ratio for an opted-out pool, or ratios that leave no pool with weight
    are an ``InvalidInputError`` naming ``strategy-option ratios``."""
    pools = {pool.id: pool for pool in plan.pools}
    for pool_id, value in given.items():
        if pool_id not in pools:
            raise InvalidInputError(
                "strategy-option ratios", f"unknown pool {pool_id!r} (the plan's pools: {', '.join(pools)})"
            )
        if not 0 <= value <= 1:
            raise InvalidInputError("strategy-option ratios", f"{pool_id}: must be in [0, 1], got {value}")
        if pools[pool_id].noise_multiplier == 0 and value != 1:
            raise InvalidInputError(
                "strategy-option ratios", f"{pool_id} has no noise (opted out); its ratio is 1"
            )
    ratios = {pool_id: float(given.get(pool_id, 1.0)) for pool_id in pools}
    if sum(ratios[p.id] * p.expected_clients for p in plan.pools) <= 0:
        raise InvalidInputError("strategy-option ratios", "every pool with clients has ratio 0: nothing is aggregated")
    return ratios


def group_lambdas(plan: Plan, given: Mapping[str, float] | float) -> dict[str, float]:
    """Group id -> ``lambda_g`` (one number for all, or per group with the default for the rest)."""
    groups = [group.id for group in plan.groups]
    if not isinstance(given, Mapping):
        values = dict.fromkeys(groups, float(given))
    else:
        unknown = sorted(set(given) - set(groups))
        if unknown:
            raise InvalidInputError(
                "strategy-option lambdas", f"unknown group {unknown[0]!r} (the plan's groups: {', '.join(groups)})"
            )
        values = {group: float(given.get(group, DEFAULT_LAMBDA)) for group in groups}
    for group, value in values.items():
        if not (value >= 0 and np.isfinite(value)):
            raise InvalidInputError("strategy-option lambdas", f"{group}: must be a finite number >= 0, got {value}")
    return values


class FedHDPStrategy(PlanStrategy):
    """FedHDP over the plan's pools (see the module docstring)."""

    def __init__(
        self,
        plan: Plan,
        *args: Any,
        ratios: Mapping[str, float] | None = None,
        lambdas: Mapping[str, float] | float = DEFAULT_LAMBDA,
        personal_lr: float | None = None,
        personalize: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(plan, *args, **kwargs)
        # the plan's predicted r* (scenarios with update_dispersion), each overridden by a given ratio
        predicted = plan.predicted.fedhdp.ratios if plan.predicted.fedhdp is not None else {}
        self.ratios = pool_ratios(plan, {**predicted, **(ratios or {})})
        self.lambdas = group_lambdas(plan, lambdas)
        self.personalize = personalize
        self.personal_lr = personal_lr
        self.personal: dict[int, torch.Tensor] = {}
        self._population: Population | None = None

    @property
    def all_ratios_one(self) -> bool:
        return all(value == 1.0 for value in self.ratios.values())

    def configure_round(self, ctx: RoundContext, population: Population) -> dict[str, np.ndarray]:
        self._population = population
        return super().configure_round(ctx, population)

    def client_update(
        self, ctx: RoundContext, global_params: torch.Tensor, clients: np.ndarray, groups: list[str]
    ) -> torch.Tensor:
        # The released rows are exactly PlanStrategy's: personalisation only reads them.
        updates = super().client_update(ctx, global_params, clients, groups)
        if self.personalize and clients.size:
            self._train_personal(ctx, global_params, [int(c) for c in clients], groups)
        return updates

    def _train_personal(self, ctx: RoundContext, global_params: torch.Tensor, clients: list[int], groups: list[str]) -> None:
        """One Ditto step per sampled client: its personal model, anchored at the received
        global model, on the same minibatches (docs/trainer.md §FedHDP)."""
        from dataclasses import replace

        received = global_params.detach()
        start = torch.stack([self.personal.get(c, received.cpu()).to(received) for c in clients])
        local = self.local if self.personal_lr is None else replace(self.local, lr=self.personal_lr)
        deltas = train_clients(
            self.engine,  # type: ignore[arg-type]
            self.model,
            received,
            self.dataset,
            clients,
            local,
            seed=ctx.seed,
            round_index=ctx.global_round,
            device=self.device,
            start=start,
            anchor=received,
            prox=[self.lambdas[g] for g in groups],
        )
        for row, client in enumerate(clients):
            self.personal[client] = (start[row] + deltas[row]).detach().cpu().clone()

    def aggregate(
        self, ctx: RoundContext, pool_sums: Mapping[str, torch.Tensor | None], dim: int
    ) -> torch.Tensor:
        if self.all_ratios_one:
            return super().aggregate(ctx, pool_sums, dim)
        total = torch.zeros(dim, dtype=torch.float64, device=self.device)
        denominator = 0.0
        for pool in self.plan.pools:
            ratio = self.ratios[pool.id]
            denominator += ratio * pool.expected_clients
            pool_sum = pool_sums.get(pool.id)
            if pool_sum is None or ratio == 0:
                continue
            total += ratio * top_k(pool_sum.to(total), pool.keep_ratio)
        return total / denominator

    def run_warnings(self, dataset: Any) -> list[str]:
        """Personal models are scored on each client's own test rows only: without them the
        run would report ``personal_accuracy_by_group: null`` and say nothing (docs/trainer.md §FedHDP)."""
        if not self.personalize or getattr(dataset, "has_client_tests", False):
            return []
        return [
            "fedhdp: the dataset has no per-client test rows, so the personal models are trained but never "
            "evaluated (personal_accuracy and personal_accuracy_by_group stay null); hold some out with "
            "--dataset-option client_test_fraction=0.25, or turn them off with --strategy-option personalize=false"
        ]

    def evaluate(self, ctx: RoundContext, global_params: torch.Tensor, dataset: Any) -> dict[str, float] | None:
        """Personal models on each client's own test rows (``personal_accuracy`` overall and
        ``personal_accuracy.<group>``: means over clients); ``None`` without local test
        data or personalisation. The scores come from ``score_clients``, or from the clients
        themselves where they hold their personal models (``remote_scores``, Flower nodes)."""
        if not self.personalize or not getattr(dataset, "has_client_tests", False) or self._population is None:
            return None
        received = global_params.detach().cpu()
        score = self.remote_scores or self.score_clients
        metrics: dict[str, float] = {}
        every: list[torch.Tensor] = []
        for group_id, members in self._population.group_clients.items():
            scores = score([int(c) for c in members], received, dataset)
            if scores is not None:
                group_accuracy = scores.accuracy[scores.count > 0]
                if group_accuracy.numel():
                    metrics[f"personal_accuracy.{group_id}"] = float(group_accuracy.mean())
                    every.append(group_accuracy)
        if every:
            pooled = torch.cat(every)
            metrics["personal_accuracy"] = float(pooled.mean())
            metrics["personal_accuracy_variance"] = float(pooled.var(unbiased=False))
        return metrics

    def score_clients(self, clients: Sequence[int], global_params: torch.Tensor, dataset: Any) -> ClientScores:
        """Each client's personal model (the received global model where it has none) on its
        own test rows, ``EVALUATION_CHUNK`` clients at a time."""
        received = global_params.detach().cpu()
        parts: list[ClientScores] = []
        for start in range(0, len(clients), EVALUATION_CHUNK):
            part = [int(c) for c in clients[start : start + EVALUATION_CHUNK]]
            rows = torch.stack([self.personal.get(c, received) for c in part]).to(global_params.dtype)
            parts.append(evaluate_clients(self.model, rows, dataset, part, device=self.device))
        if not parts:
            empty = torch.zeros(0, dtype=torch.int64)
            return ClientScores(torch.zeros(0, dtype=torch.float64), empty, empty)
        return ClientScores(*(torch.cat([getattr(p, name) for p in parts]) for name in ("loss_sum", "correct", "count")))

    def client_state(self, client: int) -> dict[str, torch.Tensor]:
        """The client's personal model, once it has one (docs/flower.md §2, "Per-client state")."""
        personal = self.personal.get(client)
        return {} if personal is None else {"personal": personal}

    def load_client_state(self, client: int, state: Mapping[str, torch.Tensor]) -> None:
        unknown = sorted(set(state) - {"personal"})
        if unknown:
            raise ValueError(f"FedHDPStrategy keeps only a personal model per client, not {unknown}")
        if "personal" in state:
            self.personal[client] = state["personal"].detach().cpu().clone()
        else:
            self.personal.pop(client, None)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        clients = sorted(self.personal)
        state["personal_clients"] = torch.tensor(clients, dtype=torch.int64)
        state["personal"] = torch.stack([self.personal[c] for c in clients]) if clients else torch.zeros(0)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict({key: state[key] for key in ("momentum", "adaptive_clip") if key in state})
        clients = state["personal_clients"].tolist() if "personal_clients" in state else []
        self.personal = {c: state["personal"][i].clone() for i, c in enumerate(clients)}


SPEC = StrategySpec(
    name="fedhdp",
    summary="FedHDP/FeO2: per-pool ratios r_P (sum r_P top_k(S_P) / sum r_P K_P) and Ditto personal models",
    strategy=FedHDPStrategy,
    options=FedHDPOptions,
    privacy_unit="client",
    plan_methods=None,
    default_plan_method="gdpfed",
    keeps_client_state=True,
)
