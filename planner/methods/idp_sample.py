"""``idp_sample`` (Boenisch et al.'s "sample"): one pool, per-group rates, one shared sigma.

docs/planning.md §4.3. Opted-out groups run at the uniform rate in pools of their own;
the private pool delivers the rest of K. Rates come from an exact 1-D search on the
shared noise std with ``accounting.sampling_rate`` per group.
"""

from __future__ import annotations

import numpy as np

from accounting.errors import InfeasibleError
from planner.methods.base import Design, PlanningMethod, frozen_pools, split_private, uniform_rates
from planner.methods.search import equalise_exact, full_curves, private_rate_bounds, subset_of
from planner.pools import build_pool_set
from planner.problem import Problem


def build(problem: Problem) -> Design:
    """One pool; per-group rates so one shared sigma meets every budget; minimise sigma."""
    private, opted_out = split_private(problem)
    rates = uniform_rates(problem)
    pools = ([private] if private else []) + opted_out + frozen_pools(problem)
    if private:
        idx = np.array(private)
        total = float(np.dot(problem.num_clients[idx], rates[idx]))
        curves = full_curves(problem, idx)
        lo, hi = private_rate_bounds(problem, subset_of(curves, idx), idx)
        labels = [problem.label(g) for g in range(problem.n_groups)]
        pool_set = build_pool_set([private], problem.private, problem.num_clients, lo, hi, curves, 1, labels)
        if total < pool_set.lower[0] - 1e-9 * total:
            raise InfeasibleError(
                f"idp_sample: the private pool's share of K ({total:.6g}) is below what the groups' "
                f"min_sampling_rate values require ({pool_set.lower[0]:.6g})"
            )
        approx = pool_set.member_rates(np.array([total]))
        rates[idx] = equalise_exact(problem, private, total, approx[idx], lo, hi)
    return Design("idp_sample", pools, rates, [1.0] * len(pools), problem.clip_norms.copy())


METHOD = PlanningMethod(
    name="idp_sample",
    summary="one pool; per-group sampling rates so one shared noise multiplier meets every budget, minimised",
    build=build,
    optimises_rates=True,
)
