"""One round of a ``metric_local`` plan: local Laplace releases, no secure aggregation.

(docs/metric-privacy.md §5.) The client-level engine (``trainer/units/client/rounds.py``) clips,
adds Gaussian noise shares and sums under secure aggregation; this engine does none of
that and calls none of it. Each selected client's trained model is released with
Laplace noise drawn *here* (``trainer.units.metric.mechanism.sanitize``, generator
``(seed, round, PURPOSE_LAPLACE, client)``), so a strategy never chooses or sees the
noise, and the server-side step sees only released vectors.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from accounting.errors import InvalidInputError
from planner.units.metric_local import MetricPlan
from trainer.run.outcome import RoundOutcome
from trainer.strategies.base import PURPOSE_LAPLACE, LocalReleaseStrategy, Population, RoundContext, Strategy
from trainer.units.metric.mechanism import next_public_radius, sanitize
from trainer.units.metric.tally import MetricTally


class MetricRoundEngine:
    """Runs rounds of a ``LocalReleaseStrategy`` under a metric plan's Laplace mechanism."""

    def __init__(
        self, plan: MetricPlan, strategy: Strategy, population: Population, dim: int, tally: MetricTally
    ) -> None:
        if getattr(plan, "privacy_unit", None) != "metric_local":
            raise InvalidInputError(
                "privacy_unit",
                f"the metric mechanism runs metric_local plans only; this plan's privacy_unit is {plan.privacy_unit!r}",
            )
        if not isinstance(strategy, LocalReleaseStrategy):
            raise InvalidInputError("strategy", f"{type(strategy).__name__} does not release individual models")
        self.plan = plan
        self.strategy = strategy
        self.population = population
        self.dim = dim
        self.tally = tally
        self.model_dim = plan.scenario.model_dim
        self.noise_multiplier = {g.id: g.noise_multiplier for g in plan.groups}
        # the public radius r_t of the coming round (rules public and previous_round)
        self.radius = plan.scenario.radius

    def state_dict(self) -> dict[str, float | None]:
        return {"radius": self.radius}

    def load_state_dict(self, state: dict[str, float | None]) -> None:
        self.radius = state["radius"]

    def run(self, ctx: RoundContext, global_params: torch.Tensor) -> tuple[torch.Tensor, RoundOutcome]:
        """One round from ``global_params``; returns the next parameters and what happened."""
        timing: dict[str, float] = {}
        started = time.perf_counter()
        eligible = {g.id: self.tally.eligible(g.id, self.population.clients(g.id)) for g in self.plan.groups}
        selection = self.strategy.configure_round(ctx, Population(eligible))
        chosen: list[tuple[int, str]] = []
        for group in self.plan.groups:
            picked = np.asarray(selection.get(group.id, np.zeros(0, dtype=np.int64)))
            outside = set(picked.tolist()) - set(eligible[group.id].tolist())
            if outside:
                raise RuntimeError(f"the strategy selected clients {sorted(outside)[:5]} of group {group.id} that are not eligible")
            chosen += [(int(c), group.id) for c in picked.tolist()]
        timing["select"] = time.perf_counter() - started

        answered, rows, nonfinite = self.release(ctx, global_params, chosen, timing)

        tick = time.perf_counter()
        scenario = self.plan.scenario
        own = scenario.radius_rule == "own_update"
        released = torch.from_numpy(np.stack(rows) if rows else np.zeros((0, self.model_dim)))
        # every selected client counts, released or not (never optimistic)
        self.tally.record_participations(chosen, radius=None if own else self.radius)
        if scenario.radius_rule == "previous_round":
            # r_{t+1} from what this round released and what it broadcast: public data only (§3.1)
            assert self.radius is not None and scenario.min_radius is not None and scenario.radius is not None
            self.radius = next_public_radius(
                released.numpy(), global_params.detach().to("cpu", torch.float64).reshape(-1, self.model_dim).numpy(),
                np.array([self.noise_multiplier[g] for _, g in answered]), self.radius, scenario.min_radius,
                scenario.radius,
            )
        timing["privatize"] = timing.get("privatize", 0.0) + time.perf_counter() - tick

        tick = time.perf_counter()
        new_params = self.strategy.aggregate_released(ctx, global_params, released.to(global_params.device))
        timing["aggregate"] = time.perf_counter() - tick
        counts = {g.id: sum(1 for _, gid in chosen if gid == g.id) for g in self.plan.groups}
        outcome = RoundOutcome(
            global_round=ctx.global_round,
            sampled=counts,
            survived={g.id: sum(1 for _, gid in answered if gid == g.id) for g in self.plan.groups},
            aborted_pools=[],
            abort_reasons={},
            dropped_before_masking=0,
            dropped_after_masking=0,
            timing=timing,
            nonfinite_updates=nonfinite,
            participants={g.id: [c for c, gid in chosen if gid == g.id] for g in self.plan.groups},
        )
        return new_params, outcome

    def release(self, ctx: RoundContext, global_params: torch.Tensor, chosen: list[tuple[int, str]],
                timing: dict[str, float]) -> tuple[list[tuple[int, str]], list[np.ndarray], int]:
        """The chosen clients' local training and Laplace releases: (the clients that released,
        their released models ``[n]`` float64 in that order, how many trained models were not
        finite); ``timing`` gets ``train`` and ``privatize``. Here every chosen client releases
        (the Flower scale-out's engine releases on the nodes instead, docs/flower.md §10)."""
        tick = time.perf_counter()
        ids = np.array([c for c, _ in chosen], dtype=np.int64)
        release = self.strategy.client_release(ctx, global_params, ids, [g for _, g in chosen])
        expected = (len(chosen), self.model_dim)
        if tuple(release.trained.shape) != expected or tuple(release.base.shape) != expected:
            raise ValueError(
                f"client_release returned {tuple(release.trained.shape)} and {tuple(release.base.shape)}, expected {expected}"
            )
        trained = release.trained.detach().to("cpu", torch.float64).numpy()
        base = release.base.detach().to("cpu", torch.float64).numpy()
        timing["train"] = time.perf_counter() - tick

        tick = time.perf_counter()
        rows = []
        nonfinite = 0
        for index, (client, group_id) in enumerate(chosen):
            nonfinite += int(not np.isfinite(trained[index]).all())
            rows.append(self.sanitized(trained[index], base[index], group_id, ctx.rng(PURPOSE_LAPLACE, client)))
        timing["privatize"] = time.perf_counter() - tick
        return list(chosen), rows, nonfinite

    def sanitized(self, trained: np.ndarray, base: np.ndarray, group_id: str, rng: np.random.Generator) -> np.ndarray:
        """One client's released model under the plan's radius rule (``sanitize``) at this round's radius."""
        own = self.plan.scenario.radius_rule == "own_update"
        out = sanitize(trained, base, self.noise_multiplier[group_id], rng,
                       radius_rule="own_update" if own else "public", public_radius=None if own else self.radius)
        return out.released
