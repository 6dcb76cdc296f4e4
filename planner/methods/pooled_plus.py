"""``pooled_plus``: private groups pooled in epsilon order, the partition with the smallest J.

docs/planning.md §4.4: every contiguous partition of the private groups sorted by
epsilon is solved like gdpfed_plus; opted-out groups keep noiseless pools of their own.
"""

from __future__ import annotations

from planner.methods.base import Design, PlanningMethod, split_private
from planner.methods.search import optimise_partition_search
from planner.partition import candidate_partitions
from planner.problem import Problem


def build(problem: Problem) -> Design:
    private, opted_out = split_private(problem)
    order = sorted(private, key=lambda g: (problem.epsilons[g], g))
    candidates = [partition + opted_out for partition in candidate_partitions(order)] if order else [opted_out]
    return optimise_partition_search(problem, "pooled_plus", candidates, keep_one=False)


METHOD = PlanningMethod(
    name="pooled_plus",
    summary="contiguous pools of private groups in epsilon order, the partition and rates with the smallest J",
    build=build,
    optimises_rates=True,
    minimises_objective=True,
)
