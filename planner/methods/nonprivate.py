"""``nonprivate``: one noiseless pool at the uniform rate; a baseline with no privacy claim.

docs/planning.md §2. For the trainer's non-private reference runs only: sigma = 0 for
every group, keep ratio 1.
"""

from __future__ import annotations

import numpy as np

from planner.methods.base import Design, PlanningMethod, frozen_pools, uniform_rates
from planner.problem import Problem


def build(problem: Problem) -> Design:
    active = [int(g) for g in np.flatnonzero(problem.active)]
    pools = [active] + frozen_pools(problem)
    return Design(
        method="nonprivate",
        pools=pools,
        rates=uniform_rates(problem),
        keep_ratios=[1.0] * len(pools),
        clip_norms=problem.clip_norms.copy(),
        noise_rule="none",
        warnings=["nonprivate: no differential privacy is given to any group (sigma = 0); "
                  "for non-private baselines only"],
    )


METHOD = PlanningMethod(
    name="nonprivate",
    summary="one pool without noise at the uniform rate (non-private baseline, no privacy claim)",
    build=build,
)
