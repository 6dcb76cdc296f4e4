"""``gdpfed_plus``: one pool per group, rates and keep ratios minimising J.

docs/planning.md §4 (rates) and §5 (``keep_ratio: auto``).
"""

from __future__ import annotations

import numpy as np

from planner.methods.base import Design, PlanningMethod
from planner.methods.search import optimise_partition_search
from planner.problem import Problem


def build(problem: Problem) -> Design:
    active = np.flatnonzero(problem.active)
    return optimise_partition_search(problem, "gdpfed_plus", [[[int(g)] for g in active]], keep_one=False)


METHOD = PlanningMethod(
    name="gdpfed_plus",
    summary="one pool per group, sampling rates and keep ratios that minimise the objective J",
    build=build,
    optimises_rates=True,
    minimises_objective=True,
)
