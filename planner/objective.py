"""The objective J(q, kappa) and its exact minimisation over keep ratios (docs/planning.md §3).

::

    J = bias_weight U^2 sum_P (K_P / K) (1 - kappa_P)^beta      sparsification error
      + (d / K^2)      sum_P kappa_P s_P^2                        noise kept after top-k

with K_P = sum_{g in P} q_g N_g the pool's expected clients (so sum_{g in P} p_g = K_P / K)
and s_P = sigma_P C the standard deviation of the pool's noise (per-group clip norms make
it max_g sigma_g C_g; docs/planning.md §2).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class ObjectiveTerms(NamedTuple):
    noise_energy: float
    sparsification_error: float

    @property
    def objective(self) -> float:
        return self.noise_energy + self.sparsification_error


def objective_terms(
    pool_expected_clients: np.ndarray,
    pool_noise_std: np.ndarray,
    keep_ratios: np.ndarray,
    *,
    expected_clients: float,
    model_dim: int,
    update_norm_bound: float,
    sparsity_exponent: float,
    bias_weight: float,
) -> ObjectiveTerms:
    """J's two terms for pools with expected clients K_P, noise std s_P and keep ratio kappa_P.

    docs/planning.md §3: noise = d sum kappa s^2 / K^2; bias = w U^2 sum (K_P/K)(1-kappa)^beta.
    """
    k = float(expected_clients)
    kept = np.asarray(keep_ratios, dtype=float)
    std = np.asarray(pool_noise_std, dtype=float)
    share = np.asarray(pool_expected_clients, dtype=float) / k
    noise = float(model_dim) * float(np.dot(kept, std * std)) / (k * k)
    bias = float(bias_weight) * float(update_norm_bound) ** 2 * float(
        np.dot(share, (1.0 - kept) ** float(sparsity_exponent))
    )
    return ObjectiveTerms(noise, bias)


def optimal_keep_ratio(
    bias_coefficient: np.ndarray,
    noise_coefficient: np.ndarray,
    sparsity_exponent: float,
    min_keep_ratio: float,
) -> np.ndarray:
    """argmin over kappa in [kappa_min, 1] of ``A (1 - kappa)^beta + B kappa``, per pool.

    docs/planning.md §5. A = bias_weight U^2 sum_{g in P} p_g, B = d s_P^2 / K^2.
    beta > 1 (convex): the stationary point ``1 - kappa = (B / (beta A))^(1/(beta-1))``,
    clipped — for beta = 2 that is ``kappa* = clip(1 - B / (2 A), kappa_min, 1)``.
    beta <= 1 (concave or linear in kappa): the minimum is at an end point, so both ends
    are compared. A = 0 (no bias cost) gives kappa_min when B > 0; B = 0 gives 1.
    """
    a = np.atleast_1d(np.asarray(bias_coefficient, dtype=float))
    b = np.atleast_1d(np.asarray(noise_coefficient, dtype=float))
    beta = float(sparsity_exponent)
    lo = float(min_keep_ratio)
    if beta > 1.0:
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = np.where(a > 0, (b / (beta * np.where(a > 0, a, 1.0))) ** (1.0 / (beta - 1.0)), np.inf)
        kappa = np.clip(1.0 - gap, lo, 1.0)
    else:
        at_low = a * (1.0 - lo) ** beta + b * lo
        at_one = b
        kappa = np.where(at_low < at_one, lo, 1.0)
    return np.where(b <= 0, 1.0, kappa)
