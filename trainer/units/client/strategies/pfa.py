"""PFA (Projected Federated Averaging, Liu et al. 2021) on released pool sums.

(docs/results.md §PFA.) PFA's idea: clients with a loose budget ("public") reveal the
subspace in which updates live; the noisy updates of strict clients are projected onto
it, which removes the part of their noise orthogonal to that subspace. The paper
(GDPFed+ Appendix B.2) adapts it to three groups: the loosest group is public, the
strictest is projected, the middle group is aggregated as is.

Here every group is its own pool (a ``gdpfed`` plan), and the server only ever sees
released pool sums. With ``P`` the public pool, ``S`` the strict pool and ``H`` the
``m <= history`` most recent released sums of ``P`` (this round's included), stacked as
rows of an ``[m, d]`` matrix with SVD ``H = U Sigma V^T``:

    V_r = the top ``r = min(rank, m)`` right singular vectors (rows of V^T)
    S'  = V_r^T V_r S                       (orthogonal projection onto span V_r)
    Delta = (1/K) (sum_{pools other than S} top_k(S_pool) + top_k(S'))

Everything used is a released, already-noised, securely aggregated sum, so the
projection is post-processing: it costs no privacy and the plan's accounting is
unchanged. Until the public pool has released anything (it aborted in every round so
far), the strict sum is aggregated as is: there is no subspace to project onto.

Choice of ``rank`` and ``history``: the original PFA projects onto the top eigenvectors of
the current round's *individual* public updates; here only one public vector per round
exists (the pool sum), so the subspace is estimated from the last ``history`` rounds.
Updates drift as the model trains, so a long history describes a stale subspace; a short
one has few vectors. The defaults ``rank=4``, ``history=8`` keep a subspace spanned by
half of the vectors of the last eight rounds (see docs/results.md §PFA for what we
measured with them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import ConfigDict, Field

from accounting.errors import InvalidInputError
from accounting.validation import InputModel
from planner.schema import Plan
from trainer.strategies.base import RoundContext, StrategySpec
from trainer.units.client.sparsify import top_k
from trainer.units.client.strategies.plan import PlanStrategy

DEFAULT_RANK = 4
DEFAULT_HISTORY = 8


def principal_subspace(history: torch.Tensor, rank: int) -> torch.Tensor:
    """The top ``min(rank, m)`` right singular vectors of ``history`` ``[m, d]``, as rows
    ``[r, d]`` (orthonormal). Directions with a zero singular value are dropped."""
    if history.ndim != 2 or history.shape[0] == 0:
        raise ValueError("history must be a non-empty [m, d] matrix")
    _, singular, vh = torch.linalg.svd(history, full_matrices=False)
    keep = min(rank, int(history.shape[0]))
    tolerance = singular.max() * max(history.shape) * torch.finfo(history.dtype).eps
    keep = min(keep, int((singular > tolerance).sum()))
    return vh[:keep]


def project(vector: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """``V_r^T V_r x``: the orthogonal projection of ``x`` onto the row span of ``basis``."""
    if basis.shape[0] == 0:
        return torch.zeros_like(vector)
    return basis.T @ (basis @ vector)


def public_and_strict_pools(plan: Plan) -> tuple[str, str]:
    """(public pool, strict pool): the pools of the loosest and the strictest group.

    An opted-out group (``epsilon`` null) counts as the loosest. Raises
    ``InvalidInputError("method", ...)`` when both are the same pool (one shared pool:
    there is nothing to project onto).
    """
    def looseness(group: Any) -> float:
        return float("inf") if group.epsilon is None else float(group.epsilon)

    active = [g for g in plan.groups if g.sampling_rate > 0] or list(plan.groups)
    loosest = max(active, key=looseness)
    strictest = min(active, key=looseness)
    if loosest.pool == strictest.pool:
        raise InvalidInputError(
            "method",
            f"pfa needs the loosest and the strictest group in different pools; the {plan.method} "
            f"plan puts both in pool {loosest.pool} (plan with gdpfed: one pool per group)",
        )
    return loosest.pool, strictest.pool


class PFAStrategy(PlanStrategy):
    """PFA over the plan's pools (see the module docstring): same selection, local training
    and server step as ``PlanStrategy``; only ``aggregate`` differs."""

    def __init__(self, plan: Plan, *args: Any, rank: int = DEFAULT_RANK, history: int = DEFAULT_HISTORY, **kwargs: Any) -> None:
        super().__init__(plan, *args, **kwargs)
        if rank < 1:
            raise InvalidInputError("pfa.rank", f"must be at least 1, got {rank}")
        if history < 1:
            raise InvalidInputError("pfa.history", f"must be at least 1, got {history}")
        self.rank = rank
        self.history_length = history
        self.public_pool, self.strict_pool = public_and_strict_pools(plan)
        self._history: list[torch.Tensor] = []

    def aggregate(
        self, ctx: RoundContext, pool_sums: Mapping[str, torch.Tensor | None], dim: int
    ) -> torch.Tensor:
        public = pool_sums.get(self.public_pool)
        if public is not None:
            self._history.append(public.detach().to("cpu", torch.float64).clone())
            self._history = self._history[-self.history_length :]
        total = torch.zeros(dim, dtype=torch.float64, device=self.device)
        for pool in self.plan.pools:
            pool_sum = pool_sums.get(pool.id)
            if pool_sum is None:
                continue
            pool_sum = pool_sum.to(total)
            if pool.id == self.strict_pool and self._history:
                basis = principal_subspace(torch.stack(self._history), self.rank).to(total)
                pool_sum = project(pool_sum, basis)
            total += top_k(pool_sum, pool.keep_ratio)
        return total / self.denominator

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["public_history"] = torch.stack(self._history) if self._history else None
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        history = state.get("public_history")
        super().load_state_dict({k: v for k, v in state.items() if k != "public_history"})
        self._history = [] if history is None else [row.clone() for row in history]


class PFAOptions(InputModel):
    """``--strategy-option rank=4 --strategy-option history=8`` (docs/results.md §PFA)."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(DEFAULT_RANK, ge=1, description="dimension of the public subspace")
    history: int = Field(DEFAULT_HISTORY, ge=1, description="released public pool sums it is estimated from")


SPEC = StrategySpec(
    name="pfa",
    summary="PFA: project the strictest pool's released sum onto the public (loosest) pool's recent subspace",
    strategy=PFAStrategy,
    options=PFAOptions,
    privacy_unit="client",
    # one pool per group, so the loosest and the strictest group release separate sums
    plan_methods=("gdpfed", "gdpfed_minus", "gdpfed_plus"),
    default_plan_method="gdpfed",
)
