"""The rate-search machinery the optimising methods share (docs/planning.md §4).

Tabulated noise curves, per-group rate bounds, the search over pool partitions that keeps
the smallest objective J (gdpfed_minus, gdpfed_plus, pooled_plus) and the exact 1-D
search that gives a shared pool one noise std (idp_sample). Each method lives in its own
module of this package; nothing here is a privacy claim (planner.finalize calibrates and
verifies).
"""

from __future__ import annotations

import math

import numpy as np

from accounting.errors import InfeasibleError
from planner import calibration
from planner.curves import NoiseCurves, build_curves, rate_grid, subset_curves
from planner.methods.base import Design, frozen_pools, objective_constants, pool_keep_setting, uniform_rate
from planner.pools import PoolSet, build_pool_set
from planner.problem import Problem
from planner.solve import PoolSolution, solve_pools

# idp_sample's exact 1-D search calls accounting.sampling_rate per group and step; above
# this many private groups the tabulated curves choose the rates (then exact calibration).
EXACT_SEARCH_LIMIT = 64


def private_rate_bounds(problem: Problem, curves: NoiseCurves | None, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-group rate bounds [min_sampling_rate, min(1, calibration cap)], all groups."""
    lo = problem.min_rates.copy()
    hi = np.ones(problem.n_groups)
    if curves is not None:
        hi[indices] = np.minimum(1.0, curves.rate_cap)
        for g in indices:
            if hi[g] < lo[g]:
                raise InfeasibleError(
                    f"{problem.label(g)} needs a noise multiplier above the calibration cap even at "
                    f"its min_sampling_rate {lo[g]:g}"
                )
    return lo, hi


def noise_curves(problem: Problem, indices: np.ndarray) -> NoiseCurves:
    """Tabulated s_g(q) for the groups at ``indices`` (docs/planning.md §4.2).

    The grid runs from half the smallest per-group pool floor (or a tenth of the uniform
    rate, if lower) up to 1, 5 points per decade (3 with spent histories, which are
    calibrated point by point): the rdp curve itself has kinks of ~0.5% where the optimal
    order switches, so denser grids do not help; below the grid the curves continue in
    log-log.
    """
    grid = rate_grid(_grid_floor(problem, indices), points_per_decade=3 if problem.has_spent else 5)
    s = problem.scenario
    table = calibration.noise_table(
        grid,
        problem.epsilons[indices],
        problem.rounds,
        s.delta,
        s.accountant,
        [problem.spent[g] for g in indices] if problem.has_spent else None,
        spent_epsilons=[problem.spent_epsilon(g) for g in indices] if problem.has_spent else None,
    )
    feasible = np.isfinite(table).sum(axis=0)
    for row, g in enumerate(indices):
        if feasible[row] < 2:
            raise InfeasibleError(
                f"{problem.label(g)} needs a noise multiplier above the calibration cap at every "
                f"sampling rate from {grid[1]:.3g} up over {problem.rounds} rounds"
            )
    return build_curves(grid, table, problem.clip_norms[indices])


def _grid_floor(problem: Problem, indices: np.ndarray) -> float:
    m = problem.scenario.min_clients_per_pool
    floors = np.maximum(problem.min_rates[indices], m / problem.num_clients[indices])
    return float(max(1e-7, min(0.5 * floors.min(), 0.1 * uniform_rate(problem))))


def closed_form_slopes(problem: Problem) -> np.ndarray | None:
    """s_g(q) / q for every group when the accountant's sigma is linear in q (the closed form);
    None for other accountants or with history."""
    s = problem.scenario
    if problem.has_spent:
        return None
    private = np.flatnonzero(problem.active_private)
    sigma_slopes = calibration.noise_slopes(problem.epsilons[private], problem.rounds, s.delta, s.accountant)
    if sigma_slopes is None:
        return None
    slopes = np.zeros(problem.n_groups)
    slopes[private] = sigma_slopes * problem.clip_norms[private]
    return slopes


def full_curves(problem: Problem, indices: np.ndarray) -> NoiseCurves:
    """Curves indexed by group over all groups (rows of non-listed groups are placeholders)."""
    sub = noise_curves(problem, indices)
    n = problem.n_groups
    coefficients = np.zeros((4, sub.coefficients.shape[1], n))
    coefficients[:, :, indices] = sub.coefficients
    left = np.zeros(n)
    cap = np.ones(n)
    left[indices], cap[indices] = sub.left_slope, sub.rate_cap
    return NoiseCurves(log_q=sub.log_q, coefficients=coefficients, left_slope=left, rate_cap=cap)


def optimise_partition_search(
    problem: Problem, method: str, candidates: list[list[list[int]]], keep_one: bool
) -> Design:
    """Solve every candidate partition; keep the one with the smallest J."""
    private = np.flatnonzero(problem.active_private)
    m = problem.scenario.min_clients_per_pool
    curves = full_curves(problem, private) if private.size else None
    lo, hi = private_rate_bounds(problem, subset_of(curves, private), private)
    _check_minimum_total(problem, candidates, lo)
    slopes = closed_form_slopes(problem)
    constants = objective_constants(problem)
    labels = [problem.label(g) for g in range(problem.n_groups)]
    best: tuple[float, list[list[int]], PoolSolution, PoolSet] | None = None
    errors: list[str] = []
    for partition in candidates:
        try:
            pools = build_pool_set(partition, problem.private, problem.num_clients, lo, hi, curves, m, labels)
        except InfeasibleError as exc:
            errors.append(exc.message)
            continue
        if pools.lower.sum() > problem.expected_clients * (1 + 1e-12):
            errors.append(
                f"expected_clients K={problem.expected_clients:g} is too small: the pools need at least "
                f"{pools.lower.sum():.6g} (min_clients_per_pool={m} in every private pool and the "
                "groups' min_sampling_rate)"
            )
            continue
        keep_settings = np.array(
            [1.0 if keep_one else pool_keep_setting(problem, p)[0] for p in partition]
        )
        solution = solve_pools(pools, keep_settings, constants, problem.expected_clients, slopes)
        if best is None or solution.objective < best[0]:
            best = (solution.objective, partition, solution, pools)
    if best is None:
        raise InfeasibleError(errors[0] if len(set(errors)) == 1 or len(candidates) == 1 else
                              "no pooling of the groups is feasible: " + "; ".join(sorted(set(errors))[:3]))
    _, partition, solution, pools = best
    rates = np.zeros(problem.n_groups)
    rates_active = pools.member_rates(solution.expected)
    rates[problem.active] = rates_active[problem.active]
    if curves is not None:
        for p, members in enumerate(partition):
            if len(members) > 1:
                rates[members] = equalise_exact(problem, members, float(solution.expected[p]), rates[members], lo, hi)
    pools_all = [list(p) for p in partition] + frozen_pools(problem)
    keep = list(solution.keep_ratios) + [1.0] * (len(pools_all) - len(partition))
    warnings = []
    if not keep_one:
        for members in partition:
            note = pool_keep_setting(problem, members)[1]
            if note:
                warnings.append(note)
    return Design(method, pools_all, rates, keep, problem.clip_norms.copy(), history=solution.history, warnings=warnings)


def subset_of(curves: NoiseCurves | None, indices: np.ndarray) -> NoiseCurves | None:
    if curves is None:
        return None
    return subset_curves(curves, indices)


def _check_minimum_total(problem: Problem, candidates: list[list[list[int]]], lo: np.ndarray) -> None:
    """K must cover every group's min_sampling_rate; name the cause when it does not."""
    need = float(np.dot(problem.num_clients[problem.active], lo[problem.active]))
    if need > problem.expected_clients * (1 + 1e-12):
        raise InfeasibleError(
            f"expected_clients K={problem.expected_clients:g} is below the {need:.6g} clients that the "
            "groups' min_sampling_rate values already require"
        )


def equalise_exact(
    problem: Problem, members: list[int], total: float, guess: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Rates of a shared pool from an exact 1-D search on its noise std (docs/planning.md §4.3).

    Finds the smallest std s with ``sum N_g clip(q_g(s/C_g), lo, hi) >= total`` where
    ``q_g(sigma) = accounting.sampling_rate(sigma, ...)``, then scales the rates down to meet
    the total exactly (lower rates never need more noise). Above EXACT_SEARCH_LIMIT members
    the tabulated guess is returned unchanged.
    """
    idx = np.asarray(members, dtype=int)
    if len(idx) > EXACT_SEARCH_LIMIT:
        return guess
    s = problem.scenario
    accountant = calibration.table_accountant(s.accountant)
    n = problem.num_clients[idx]
    clip = problem.clip_norms[idx]
    lo_m, hi_m = lo[idx], hi[idx]

    def rates_at(std: float) -> np.ndarray:
        out = np.empty(len(idx))
        for i, g in enumerate(idx):
            try:
                q = calibration.max_sampling_rate(
                    std / clip[i], problem.rounds, float(problem.epsilons[g]), s.delta, accountant, problem.spent[g]
                )
            except InfeasibleError:
                q = 0.0
            out[i] = q
        return np.clip(out, lo_m, hi_m)

    try:
        cal = calibration.calibrate_groups(
            guess, problem.epsilons[idx], problem.rounds, s.delta, accountant,
            [problem.spent[g] for g in idx], False, [problem.label(g) for g in idx],
        )
    except InfeasibleError:
        return guess
    # F(s) = sum N clip(q_g(s)) is non-decreasing in the shared std s. At the largest std the
    # guessed rates need, F >= total; a secant in log s then finds the smallest feasible s
    # to the calibration tolerance in a few steps (each step: one sampling_rate per group).
    high = max(c.noise_multiplier * clip[i] for i, c in enumerate(cal))
    rates_high = rates_at(high)
    f_high = float(n @ rates_high) - total
    if f_high < 0:
        return guess
    best, best_rates = high, rates_high
    x0, f0 = math.log(high), f_high
    x1 = x0 - 0.01
    for _ in range(10):
        rates1 = rates_at(math.exp(x1))
        f1 = float(n @ rates1) - total
        if f1 >= 0 and math.exp(x1) < best:
            best, best_rates = math.exp(x1), rates1
        if abs(f1) <= 2e-4 * total or f1 == f0:
            if f1 < 0:  # step just above the root so the answer is feasible
                x1 += 2 * math.log1p(1e-4)
                continue
            break
        x0, f0, x1 = x1, f1, x1 - f1 * (x1 - x0) / (f1 - f0)
    rates = best_rates
    supply = float(n @ rates)
    # scale down the members above their lower bound so the pool delivers exactly `total`
    room = rates - lo_m
    excess = supply - total
    if excess > 0 and float(n @ room) > 0:
        rates = rates - room * min(1.0, excess / float(n @ room))
    return rates
