"""The q-step / kappa-step alternation for a fixed set of pools (docs/planning.md §4 and §5).

q-step: with keep ratios fixed, J is separable over pools in K_P (the bias term is linear
in K_P, the noise term is d kappa_P s_P(K_P)^2 / K^2), so the pools' shares of K are one
allocation: exact KKT water-filling when every noisy pool is a single closed-form group
(s^2 = c q^2 makes it a QP), water-filling on convexified tabulated curves otherwise.
kappa-step: with rates fixed, each auto pool's keep ratio has a closed form
(:func:`planner.objective.optimal_keep_ratio`). Each step never increases J, so the
alternation stops when J stops falling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.allocate import allocate
from planner.objective import optimal_keep_ratio
from planner.pools import NO_NOISE, SINGLE, PoolSet
from planner.waterfill import waterfill_qp

_MAX_ALTERNATIONS = 60
_STOP_RELATIVE = 1e-9


@dataclass(frozen=True)
class ObjectiveConstants:
    expected_clients: float  # K
    model_dim: float  # d
    update_norm_bound: float  # U
    sparsity_exponent: float  # beta
    bias_weight: float
    min_keep_ratio: float


@dataclass
class PoolSolution:
    expected: np.ndarray  # K_P per pool
    keep_ratios: np.ndarray  # kappa_P per pool
    objective: float  # J on the interpolated curves
    history: list[float] = field(default_factory=list)  # J after every q- and kappa-step


def pool_objective(pools: PoolSet, expected: np.ndarray, keep: np.ndarray, c: ObjectiveConstants) -> float:
    """J at pool loads K_P and keep ratios kappa_P (docs/planning.md §3)."""
    s = pools.std(expected[:, None])[:, 0]
    k = c.expected_clients
    bias = c.bias_weight * c.update_norm_bound**2 * float(np.dot(expected / k, (1 - keep) ** c.sparsity_exponent))
    # a std near 1e300 (a closed-form group at epsilon 1e-300) squares to inf: J is inf, no warning
    with np.errstate(over="ignore"):
        noise = c.model_dim * float(np.dot(keep, s * s)) / (k * k)
    return bias + noise


def solve_pools(
    pools: PoolSet,
    keep_settings: np.ndarray,
    c: ObjectiveConstants,
    total: float,
    closed_form_slopes: np.ndarray | None = None,
) -> PoolSolution:
    """Minimise J over K_P (sum = total) and the auto keep ratios (docs/planning.md §5).

    ``keep_settings``: per pool, a fixed kappa in (0, 1] or a negative number for auto.
    ``closed_form_slopes``: per group, s_g(q) / q when the closed form is in use (the
    q-step is then an exact QP for single-group pools).
    """
    auto = keep_settings < 0
    keep = np.where(auto, 1.0, keep_settings)
    # A pool without noise keeps everything: sparsifying it only adds bias.
    keep = np.where(pools.kind == NO_NOISE, 1.0, keep)
    auto = auto & (pools.kind != NO_NOISE)
    expected = _q_step(pools, keep, c, total, closed_form_slopes)
    value = pool_objective(pools, expected, keep, c)
    history = [value]
    for _ in range(_MAX_ALTERNATIONS if np.any(auto) else 0):
        s = pools.std(expected[:, None])[:, 0]
        bias_coefficient = c.bias_weight * c.update_norm_bound**2 * expected / c.expected_clients
        noise_coefficient = c.model_dim * s * s / c.expected_clients**2
        new_keep = keep.copy()
        new_keep[auto] = optimal_keep_ratio(
            bias_coefficient[auto], noise_coefficient[auto], c.sparsity_exponent, c.min_keep_ratio
        )
        after_keep = pool_objective(pools, expected, new_keep, c)
        if after_keep > value:  # the kappa-step is an exact minimiser; guard round-off
            break
        keep = new_keep
        history.append(after_keep)
        candidate = _q_step(pools, keep, c, total, closed_form_slopes)
        after_q = pool_objective(pools, candidate, keep, c)
        if after_q <= after_keep:
            expected = candidate
        else:
            after_q = after_keep  # keep the previous rates: J must not rise
        history.append(after_q)
        improved = value - after_q
        value = after_q
        if improved <= _STOP_RELATIVE * max(abs(value), 1e-300):
            break
    return PoolSolution(expected=expected, keep_ratios=keep, objective=value, history=history)


def _q_step(
    pools: PoolSet,
    keep: np.ndarray,
    c: ObjectiveConstants,
    total: float,
    closed_form_slopes: np.ndarray | None,
) -> np.ndarray:
    """argmin over K_P of J with keep ratios fixed (docs/planning.md §4)."""
    k = c.expected_clients
    linear = c.bias_weight * c.update_norm_bound**2 * (1 - keep) ** c.sparsity_exponent / k
    noise_weight = c.model_dim * keep / (k * k)
    ones = np.ones(pools.n_pools)
    if closed_form_slopes is not None and np.all(pools.kind != 2):
        # s_P(K) = slope_g K / N_g for a single closed-form group: an exact QP in K.
        slope = np.zeros(pools.n_pools)
        single = pools.kind == SINGLE
        groups = pools.single_group[single]
        slope[single] = closed_form_slopes[groups] / pools.num_clients[groups]
        # A slope near 1e300 (a closed-form group at epsilon 1e-300) squares to inf and the QP
        # then meets inf * 0; finalize refuses that group by name ("no finite sampling rate"),
        # so numpy's warnings would only put lines on stderr before that one error line.
        with np.errstate(over="ignore", invalid="ignore"):
            quadratic = noise_weight * slope * slope
            return waterfill_qp(linear, quadratic, ones, total, pools.lower, pools.upper).x

    def cost(x: np.ndarray) -> np.ndarray:
        s = pools.std(x)
        return linear[:, None] * x + noise_weight[:, None] * s * s

    return allocate(cost, ones, total, pools.lower, pools.upper).x
