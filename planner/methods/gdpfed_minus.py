"""``gdpfed_minus``: one pool per group, rates minimising J, no sparsification.

docs/planning.md §4: gdpfed_plus with every keep ratio fixed at 1.
"""

from __future__ import annotations

import numpy as np

from planner.methods.base import Design, PlanningMethod
from planner.methods.search import optimise_partition_search
from planner.problem import Problem


def build(problem: Problem) -> Design:
    active = np.flatnonzero(problem.active)
    return optimise_partition_search(problem, "gdpfed_minus", [[[int(g)] for g in active]], keep_one=True)


METHOD = PlanningMethod(
    name="gdpfed_minus",
    summary="one pool per group, sampling rates that minimise the objective J, keep ratio 1",
    build=build,
    optimises_rates=True,
    minimises_objective=True,
)
