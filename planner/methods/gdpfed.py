"""``gdpfed``: one pool per group at the uniform rate (docs/planning.md §2)."""

from __future__ import annotations

from planner.methods.base import Design, PlanningMethod, uniform_rates
from planner.problem import Problem


def build(problem: Problem) -> Design:
    pools = [[g] for g in range(problem.n_groups)]
    return Design("gdpfed", pools, uniform_rates(problem), [1.0] * len(pools), problem.clip_norms.copy())


METHOD = PlanningMethod(
    name="gdpfed",
    summary="one pool per group at the uniform rate, each with the noise its own budget needs",
    build=build,
)
