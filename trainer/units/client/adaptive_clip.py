"""The server's side of adaptive clipping: ``S^t`` and its geometric update.

(docs/trainer.md §Adaptive clipping; the plan's side in docs/planning.md §15.) Andrew et
al. 2021 as FedHDP's Algorithm 2 step 6 uses it: after round t the server reads each
released pool's noisy count ``c_P = sum_{i in P} (b_i - 1/2) + N(0, n sigma_b^2 / m_P)``
(``b_i = 1`` when client i's update was not clipped) and estimates the unclipped share

    b_bar = 1/2 + sum_P c_P / sum_P K_P          (released pools only)

with ``K_P`` the pool's expected clients (fixed and public, like the update's
denominator: a realised count would itself be private). Then

    S^{t+1} = S^t exp(-eta_b (b_bar - kappa)).

Both are post-processing of released values, so they cost nothing beyond the round's
``z_eff``. An aborted pool's count is missing and its ``K_P`` leaves the denominator; with
every pool aborted ``S`` stays. Torch-free: the state is one float, checkpointed with the
strategy that owns it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from accounting.errors import InvalidInputError
from planner.adaptive_clip import initial_clip_norm
from planner.schema import Plan


class AdaptiveClipping:
    """The clip norm ``S^t`` of the coming round and its update from the released counts."""

    def __init__(self, clip_norm: float, target_quantile: float, learning_rate: float, pool_clients: Mapping[str, float]) -> None:
        self.clip_norm = float(clip_norm)
        self.target_quantile = float(target_quantile)
        self.learning_rate = float(learning_rate)
        self.pool_clients = dict(pool_clients)

    @classmethod
    def from_plan(cls, plan: Plan) -> AdaptiveClipping:
        """The controller the plan's ``adaptive_clip`` block describes, at ``S^0``; a plan
        without one is refused (``InvalidInputError("strategy-option adaptive_clip")``)."""
        settings = plan.scenario.adaptive_clip
        if settings is None:
            raise InvalidInputError(
                "strategy-option adaptive_clip",
                "the plan has no adaptive_clip block, so it states no update noise multiplier sigma_Delta "
                "or count noise sigma_b: plan a scenario with one (docs/planning.md §15)",
            )
        return cls(
            initial_clip_norm(plan.scenario),
            settings.target_quantile,
            settings.learning_rate,
            {pool.id: float(pool.expected_clients) for pool in plan.pools},
        )

    def unclipped_fraction(self, counts: Mapping[str, float | None]) -> float | None:
        """``b_bar = 1/2 + sum c_P / sum K_P`` over the released pools (``None``: none released)."""
        released = {pool: count for pool, count in counts.items() if count is not None}
        denominator = sum(self.pool_clients[pool] for pool in released)
        if not denominator > 0:
            return None
        return 0.5 + sum(released.values()) / denominator

    def update(self, counts: Mapping[str, float | None]) -> float | None:
        """``S <- S exp(-eta_b (b_bar - kappa))`` from this round's counts; returns ``b_bar``."""
        fraction = self.unclipped_fraction(counts)
        if fraction is not None:
            self.clip_norm = self.clip_norm * math.exp(-self.learning_rate * (fraction - self.target_quantile))
        return fraction

    def state_dict(self) -> dict[str, Any]:
        return {"clip_norm": self.clip_norm}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.clip_norm = float(state["clip_norm"])


def adaptive_controller(strategy: object) -> AdaptiveClipping | None:
    """The strategy's adaptive-clipping controller (its ``adaptive_clip``, as ``PlanStrategy``
    holds it), ``None`` for a strategy that clips at the plan's fixed ``C_g``: a client-level
    choice, so the shared ``Strategy`` interface does not declare it."""
    controller: AdaptiveClipping | None = getattr(strategy, "adaptive_clip", None)
    return controller
