"""``dp_fedavg_all``: DP-FedAvg with everyone private, opted-out groups included (docs/planning.md §2).

FedHDP's baseline (docs/trainer.md §FedHDP, "Baselines"): the opted-out groups are planned
as if they had chosen the strictest private budget, and every group shares ``dp_fedavg``'s
one pool at the uniform rate. The scenario is unchanged (those groups still opted out);
their plan entries carry the strictest epsilon and are accounted like every private group.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from accounting.errors import InvalidInputError
from planner.methods import dp_fedavg
from planner.methods.base import Design, PlanningMethod
from planner.problem import Problem


def everyone_private(problem: Problem) -> Problem:
    """``problem`` with every opted-out group's epsilon set to the strictest private one."""
    if not problem.private.any():
        raise InvalidInputError("method", "dp_fedavg_all needs at least one private group (its strictest epsilon)")
    if problem.private.all():
        return problem
    strictest = float(np.nanmin(problem.epsilons))
    opted_out = [problem.ids[g] for g in np.flatnonzero(~problem.private)]
    note = f"dp_fedavg_all: opted-out groups {', '.join(opted_out)} planned private at the strictest epsilon {strictest:g}"
    return replace(
        problem,
        epsilons=np.where(problem.private, problem.epsilons, strictest),
        notes=(*problem.notes, note),
    )


def build(problem: Problem) -> Design:
    design = dp_fedavg.build(problem)
    design.method = "dp_fedavg_all"
    return design


METHOD = PlanningMethod(
    name="dp_fedavg_all",
    summary="DP-FedAvg with everyone private: opted-out groups planned at the strictest epsilon, one pool",
    build=build,
    prepare=everyone_private,
    # a study baseline: it gives opted-out clients noise they did not ask for, so it is
    # never a deployment's recommendation
    in_comparison=False,
)
