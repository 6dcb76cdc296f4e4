"""``metric_ifca``: IFCA with local metric privacy and server-side k-means (docs/metric-privacy.md §5).

The paper's Algorithm 1. The run's parameter vector is the concatenation of k
hypotheses (so checkpoints hold them). Each round:

- selection: U clients uniformly without replacement among the eligible ones (those
  under their participation cap; the engine offers only those);
- client: pick ``j = argmin_j F_c(theta_j)`` (mean loss on the client's training rows;
  ties to the lower index), train from ``theta_j`` (``train_clients(start=...)``) and
  hand the trained model and ``theta_j`` to the engine, which releases the model plus
  Laplace noise; the choice ``j`` is never sent;
- server: Lloyd's k-means on the released models initialised at the current hypotheses
  (until assignments stop changing, at most ``MAX_LLOYD_ITERATIONS``; ties to the lower
  index); each hypothesis becomes its cluster's mean, an empty cluster keeps its value.

k = 1 is FedAvg with metric privacy; nu = 0 is non-private IFCA.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from pydantic import ConfigDict, Field
from torch import nn
from torch.func import functional_call

from accounting.errors import InvalidInputError
from accounting.validation import InputModel
from planner.units.metric_local import MetricPlan
from trainer.engines import train_clients, unflatten_params
from trainer.engines.losses import mean_loss
from trainer.strategies.base import (
    PURPOSE_SAMPLING,
    ClientRelease,
    LocalReleaseStrategy,
    Population,
    RoundContext,
    StrategySpec,
)

MAX_LLOYD_ITERATIONS = 100


def kmeans_from(points: torch.Tensor, centers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's k-means of ``points [m, n]`` from ``centers [k, n]``: ``(centers, assignment)``.

    Assign each point to its nearest center (ties: the lower index, ``argmin``'s first),
    move every non-empty center to its points' mean, repeat until the assignment stops
    changing or ``MAX_LLOYD_ITERATIONS``; an empty cluster keeps its center. Deterministic.
    """
    centers = centers.clone()
    assignment = torch.full((points.shape[0],), -1, dtype=torch.long)
    for _ in range(MAX_LLOYD_ITERATIONS):
        if points.shape[0] == 0:
            break
        nearest = torch.cdist(points, centers).argmin(dim=1)
        if torch.equal(nearest, assignment):
            break
        assignment = nearest
        for j in range(centers.shape[0]):
            members = points[assignment == j]
            if members.shape[0]:
                centers[j] = members.mean(dim=0)
    return centers, assignment


class MetricIFCAOptions(InputModel):
    model_config = ConfigDict(extra="forbid")

    init_std: float = Field(1.0, gt=0, description="hypotheses start as N(0, init_std^2) (the paper's N(0, 1))")
    init_seed: int = Field(0, ge=0, description="seed of the hypotheses' initial draw")


class MetricIFCAStrategy(LocalReleaseStrategy):
    """IFCA with local Laplace releases (see the module docstring)."""

    def __init__(
        self,
        plan: MetricPlan,
        model: nn.Module,
        dataset: Any,
        *,
        engine: str,
        local: Any,
        device: torch.device,
        server_lr: float = 1.0,
        server_momentum: float = 0.0,
        init_std: float = 1.0,
        init_seed: int = 0,
    ) -> None:
        if server_lr != 1.0 or server_momentum != 0.0:
            raise InvalidInputError("server_lr", "metric_ifca replaces each hypothesis by its cluster mean: no server step")
        self.plan = plan  # type: ignore[assignment]  # a metric plan, not a client one
        self.model = model
        self.dataset = dataset
        self.engine = engine
        self.local = local
        self.device = torch.device(device)
        self.k = plan.scenario.hypotheses
        self.n = sum(p.numel() for p in model.parameters())
        if self.n != plan.scenario.model_dim:
            raise InvalidInputError(
                "model_dim",
                f"the plan's model_dim is {plan.scenario.model_dim} but the model has {self.n} parameters: "
                "the leakage n / nu would be wrong; plan for the model's own size",
            )
        self.init_std = init_std
        self.init_seed = init_seed

    def initial_params(self) -> torch.Tensor:
        dtype = next(self.model.parameters()).dtype
        generator = torch.Generator().manual_seed(self.init_seed)
        draw = torch.randn(self.k * self.n, generator=generator, dtype=torch.float64) * self.init_std
        return draw.to(device=self.device, dtype=dtype)

    def hypotheses(self, params: torch.Tensor) -> torch.Tensor:
        return params.reshape(self.k, self.n)

    def configure_round(self, ctx: RoundContext, population: Population) -> dict[str, np.ndarray]:
        groups = [g.id for g in self.plan.groups]
        pool = np.concatenate([population.clients(g) for g in groups]) if groups else np.zeros(0, dtype=np.int64)
        group_of = np.concatenate([np.full(population.clients(g).size, i) for i, g in enumerate(groups)])
        take = min(self.plan.scenario.clients_per_round, pool.size)  # type: ignore[attr-defined]
        picked = ctx.rng(PURPOSE_SAMPLING).choice(pool.size, size=take, replace=False) if take else np.zeros(0, dtype=np.int64)
        return {g: np.sort(pool[picked[group_of[picked] == i]]) for i, g in enumerate(groups)}

    def _output(self, row: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The model with parameters ``row`` on inputs ``x`` (no gradients)."""
        with torch.no_grad():
            return functional_call(self.model, unflatten_params(row, self.model), (x.to(device=row.device, dtype=row.dtype),))

    def _losses(self, hypotheses: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean loss of every hypothesis on ``(x, y)``: ``[k]``."""
        return torch.stack([mean_loss(self.dataset.task, self._output(row, x), y.to(row.device)) for row in hypotheses])

    def choose(self, hypotheses: torch.Tensor, client: int) -> int:
        """The hypothesis with the lowest loss on the client's training rows (ties: lower index)."""
        rows = self.dataset.client_indices[client]
        return int(torch.argmin(self._losses(hypotheses, self.dataset.train_x[rows], self.dataset.train_y[rows])))

    def client_release(
        self, ctx: RoundContext, global_params: torch.Tensor, clients: np.ndarray, groups: list[str]
    ) -> ClientRelease:
        hypotheses = self.hypotheses(global_params)
        if clients.size == 0:
            empty = global_params.new_zeros(0, self.n)
            return ClientRelease(trained=empty, base=empty)
        start = torch.stack([hypotheses[self.choose(hypotheses, int(c))] for c in clients.tolist()])
        updates = train_clients(
            self.engine,  # type: ignore[arg-type]
            self.model,
            hypotheses[0],
            self.dataset,
            [int(c) for c in clients],
            self.local,
            seed=ctx.seed,
            round_index=ctx.global_round,
            device=self.device,
            start=start,
        )
        return ClientRelease(trained=start + updates, base=start)

    def aggregate_released(self, ctx: RoundContext, global_params: torch.Tensor, released: torch.Tensor) -> torch.Tensor:
        centers, _ = kmeans_from(released.to(torch.float64), self.hypotheses(global_params).to(torch.float64))
        return centers.reshape(-1).to(global_params)

    def evaluate(self, ctx: RoundContext, global_params: torch.Tensor, dataset: Any) -> dict[str, float] | None:
        """Each client with its best hypothesis (chosen on its training rows) on its own test
        rows (``dataset.client_test_data``, when the data has per-client test splits) or,
        without them, on its training rows (``personal_train_*``)."""
        hypotheses = self.hypotheses(global_params)
        local_tests = bool(getattr(dataset, "has_client_tests", False))
        prefix = "personal" if local_tests else "personal_train"
        losses, correct, count = [], 0, 0
        chosen = [0] * self.k
        for client in range(dataset.num_clients):
            j = self.choose(hypotheses, client)
            chosen[j] += 1
            if local_tests:
                x, y = dataset.client_test_data(client)
            else:
                rows = dataset.client_indices[client]
                x, y = dataset.train_x[rows], dataset.train_y[rows]
            if y.numel() == 0:
                continue
            losses.append(float(self._losses(hypotheses[j : j + 1], x, y)[0]))
            if dataset.task != "regression":
                correct += int((self._output(hypotheses[j], x).argmax(dim=1) == y.to(hypotheses.device)).sum())
                count += int(y.numel())
        metrics = {f"{prefix}_loss": float(np.mean(losses)) if losses else math.nan}
        if dataset.task == "regression":
            metrics[f"{prefix}_rmse"] = math.sqrt(metrics[f"{prefix}_loss"])
        elif count:
            metrics[f"{prefix}_accuracy"] = correct / count
        for j, users in enumerate(chosen):
            metrics[f"hypothesis_{j}_clients"] = float(users)
        return metrics


SPEC = StrategySpec(
    name="metric_ifca",
    summary="IFCA with local metric privacy: k hypotheses, best-hypothesis local training, Laplace releases, k-means",
    strategy=MetricIFCAStrategy,
    options=MetricIFCAOptions,
    privacy_unit="metric_local",
    plan_methods=("metric_laplace",),
    default_plan_method="metric_laplace",
    tasks=("classification", "regression"),
)
