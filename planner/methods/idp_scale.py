"""``idp_scale`` (Boenisch et al.'s "scale"): one pool, uniform rate, per-group clip norms.

docs/planning.md §2: group g is clipped at ``C_g' = s / sigma_g`` so that the shared
noise std s gives it exactly the multiplier its budget needs at the uniform rate.
"""

from __future__ import annotations

from planner.methods.base import Design, PlanningMethod, frozen_pools, split_private, uniform_rates
from planner.problem import Problem


def build(problem: Problem) -> Design:
    private, opted_out = split_private(problem)
    pools = ([private] if private else []) + opted_out + frozen_pools(problem)
    return Design(
        "idp_scale", pools, uniform_rates(problem), [1.0] * len(pools), problem.clip_norms.copy(), noise_rule="scale"
    )


METHOD = PlanningMethod(
    name="idp_scale",
    summary="one pool at the uniform rate; per-group clip norms give each group the multiplier it needs",
    build=build,
)
