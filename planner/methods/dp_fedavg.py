"""``dp_fedavg``: every private group in one pool at the uniform rate (docs/planning.md §2).

The pool's noise is the largest any member needs, so the strictest budget sets it for
all; opted-out groups keep noiseless pools of their own.
"""

from __future__ import annotations

from planner.methods.base import Design, PlanningMethod, frozen_pools, split_private, uniform_rates
from planner.problem import Problem


def build(problem: Problem) -> Design:
    private, opted_out = split_private(problem)
    pools = ([private] if private else []) + opted_out + frozen_pools(problem)
    return Design("dp_fedavg", pools, uniform_rates(problem), [1.0] * len(pools), problem.clip_norms.copy())


METHOD = PlanningMethod(
    name="dp_fedavg",
    summary="one pool for all private groups at the uniform rate (the strictest budget sets the noise)",
    build=build,
)
