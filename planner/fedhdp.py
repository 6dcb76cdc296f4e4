"""FedHDP's closed forms: the server ratio ``r*`` and Ditto's ``lambda*`` (docs/planning.md §14).

Advisory numbers for ``--strategy fedhdp`` (docs/trainer.md §FedHDP), on the paper's
federated point-estimation model (docs/planning.md §14, [recon] where the paper's text is lost): client ``j`` of level
``k`` holds a local mean ``phi_hat_j = phi + p_j + v_j`` with ``p_j ~ N(0, tau2)`` (data
heterogeneity) and ``v_j ~ N(0, alpha2)`` (sampling noise), and sends ``psi_j = phi_hat_j +
l_j`` with ``l_j ~ N(0, N_k gamma2_k)`` (its level's noise; ``gamma2 = 0`` for opted-out
clients). Nothing here is a privacy number: ratios and lambdas are post-processing and a
local choice.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planner.schema import DittoLambdaPrediction, FedHDPPrediction, GroupPlan, PoolPlan, Scenario


def optimal_ratio(sigma_c2: float, private_clients: float, gamma2: float) -> float:
    """Lemma 1: ``r* = sigma_c2 / (sigma_c2 + N_p gamma2)``, the weight of a private client
    relative to an opted-out one that minimises the server's MSE (``sigma_c2 = alpha2 + tau2``)."""
    return sigma_c2 / (sigma_c2 + private_clients * gamma2)


def server_mse(ratio: float, sigma_c2: float, optout_clients: float, private_clients: float, gamma2: float) -> float:
    """Variance of ``(sum_np psi + r sum_p psi) / (N_np + r N_p)`` around ``phi``:
    ``(N_np sigma_c2 + r^2 N_p (sigma_c2 + N_p gamma2)) / (N_np + r N_p)^2``."""
    private_variance = sigma_c2 + private_clients * gamma2
    numerator = optout_clients * sigma_c2 + ratio**2 * private_clients * private_variance
    return numerator / (optout_clients + ratio * private_clients) ** 2


def optimal_server_mse(sigma_c2: float, optout_clients: float, private_clients: float, gamma2: float) -> float:
    """Lemma 1: ``(1/N) sigma_c2 (sigma_c2 + N_p gamma2) / (sigma_c2 + rho N_p gamma2)``, rho = N_np / N."""
    total = optout_clients + private_clients
    rho = optout_clients / total
    return sigma_c2 * (sigma_c2 + private_clients * gamma2) / (total * (sigma_c2 + rho * private_clients * gamma2))


def level_ratios(alpha2: float, tau2: float, counts: Sequence[float], gamma2: Sequence[float]) -> np.ndarray:
    """``r*_k = sigma2_p(1) / sigma2_p(k)`` with ``sigma2_p(k) = alpha2 + tau2 + N_k gamma2_k``:
    inverse-variance weights relative to the first level (App. A; the first level is
    usually the opted-out one, ``r = 1``)."""
    variance = alpha2 + tau2 + np.asarray(counts, dtype=float) * np.asarray(gamma2, dtype=float)
    return variance[0] / variance


def optimal_lambdas(alpha2: float, tau2: float, counts: Sequence[float], gamma2: Sequence[float]) -> np.ndarray:
    """Ditto's ``lambda*`` per level when the server uses ``level_ratios`` (docs/planning.md §14)::

        sigma2_k = alpha2 + tau2 + N_k gamma2_k
        A_j      = sum_k N_k / sigma2_k - 1 / sigma2_j     (precision of all other clients)
        w_j      = (1 / sigma2_j) / sum_k N_k / sigma2_k   (own weight in the global model)
        rho_j    = alpha2 A_j / (1 + tau2 A_j)
        lambda*_j = rho_j / (1 - w_j (1 + rho_j))

    It reduces to the paper's (17) ``alpha2 / tau2`` for opted-out clients and to (18)
    (``optimal_lambda_private``) for private ones with two levels (tests). ``nan`` where
    ``1 - w_j (1 + rho_j) <= 0`` (no finite lambda is optimal).
    """
    variance = alpha2 + tau2 + np.asarray(counts, dtype=float) * np.asarray(gamma2, dtype=float)
    precision = float(np.sum(np.asarray(counts, dtype=float) / variance))
    others = precision - 1.0 / variance
    own_weight = (1.0 / variance) / precision
    bayes = alpha2 * others / (1.0 + tau2 * others)
    denominator = 1.0 - own_weight * (1.0 + bayes)
    return np.where(denominator > 0, bayes / np.where(denominator > 0, denominator, 1.0), np.nan)


def optimal_lambda_private(alpha2: float, tau2: float, gamma2: float, total: float, optout_share: float) -> float:
    """The paper's (18): ``lambda*_p`` for two levels (``N_p = (1 - rho) N`` private clients
    with noise ``N_p gamma2`` each, ``N_np = rho N`` opted out)."""
    rho = optout_share
    numerator = alpha2 * (tau2 + alpha2) + rho * (1 - rho) * alpha2 * gamma2 * total
    denominator = tau2 * (tau2 + alpha2) + (1 - rho) * (alpha2 + tau2) * gamma2 + (1 - rho) * rho * tau2 * gamma2 * total
    return numerator / denominator


def pool_ratio(update_dispersion: float, model_dim: int, noise_std: float, expected_clients: float) -> float:
    """``r_P* = (V/d) / (V/d + s_P^2 / K_P)`` for a noised pool of the trainer
    (docs/planning.md §14, [recon]): ``V = E||Delta_i - mean Delta||^2`` the clipped updates' dispersion across
    clients, ``s_P = sigma_P C`` the pool sum's noise std, ``K_P`` its expected clients. It
    minimises the variance of the combined update and ignores the bias between groups,
    which makes the best ratio larger when opted-out clients are unrepresentative."""
    per_coordinate = update_dispersion / model_dim
    if per_coordinate <= 0:
        return 0.0
    return per_coordinate / (per_coordinate + noise_std**2 / expected_clients)


def fedhdp_prediction(scenario: Scenario, groups: Sequence[GroupPlan], pools: Sequence[PoolPlan]) -> FedHDPPrediction | None:
    """The plan's FedHDP ratios from ``scenario.update_dispersion`` (``None`` without it):
    ``pool_ratio`` for pools with noise, 1 for the others; each group's resulting weight
    ``r_P q_g N_g / sum_P r_P K_P``, and the noise energy of the ratio-weighted combination
    ``d sum_P kappa_P r_P^2 s_P^2 / (sum_P r_P K_P)^2`` (with every ``r = 1`` and
    ``sum K_P = K`` it is the plan's own noise energy)."""
    if scenario.update_dispersion is None:
        return None
    ratios = {
        pool.id: pool_ratio(scenario.update_dispersion, scenario.model_dim, pool.noise_std, pool.expected_clients)
        if pool.noise_std > 0 and pool.expected_clients > 0 else 1.0
        for pool in pools
    }
    denominator = sum(ratios[pool.id] * pool.expected_clients for pool in pools)
    if denominator <= 0:
        return None
    weights = {group.id: ratios[group.pool] * group.expected_clients / denominator for group in groups}
    energy = scenario.model_dim * sum(
        pool.keep_ratio * ratios[pool.id] ** 2 * pool.noise_std**2 for pool in pools
    ) / denominator**2
    return FedHDPPrediction(ratios=ratios, aggregation_weights=weights, noise_energy=energy)


DITTO_ASSUMPTIONS = (
    "FedHDP's point-estimation model per model coordinate (linear or mean-estimation models; alpha^2 and "
    "tau^2 have no exact meaning for a neural network): one round, each pool a level whose K_P expected "
    "clients each carry alpha^2 + tau^2 plus the per-client share s_P^2 / K_P of the pool's noise; the server "
    "combines the pools with assumed_ratios (inverse-variance weights), and lambda* is Bayes-optimal only "
    "under those ratios; null where 1 - w_j (1 + rho_j) <= 0 (no finite lambda is optimal)"
)


def ditto_lambda_prediction(
    scenario: Scenario, groups: Sequence[GroupPlan], pools: Sequence[PoolPlan]
) -> DittoLambdaPrediction | None:
    """Ditto's advisory ``lambda*`` per group (``None`` without the scenario's
    ``sampling_variance_per_coordinate`` alpha2 and ``heterogeneity_variance_per_coordinate`` tau2).

    Each pool with expected clients is a level of the point-estimation model with
    ``N_k = K_P`` clients and per-client noise ``N_k gamma2_k = s_P^2 / K_P`` (the pool sum's
    noise variance spread over its clients, as in ``pool_ratio``), so
    ``sigma2_P = alpha2 + tau2 + s_P^2 / K_P``; ``optimal_lambdas`` gives each level's
    ``lambda*`` under the inverse-variance ratios ``r_P = min_k sigma2_k / sigma2_P``
    (docs/planning.md §14). With ``V/d = alpha2 + tau2`` these ratios are ``pool_ratio``'s."""
    alpha2 = scenario.sampling_variance_per_coordinate
    tau2 = scenario.heterogeneity_variance_per_coordinate
    if alpha2 is None or tau2 is None:
        return None
    levels = [pool for pool in pools if pool.expected_clients > 0]
    if not levels:
        return None
    counts = np.array([pool.expected_clients for pool in levels], dtype=float)
    gamma2 = np.array([pool.noise_std**2 for pool in levels], dtype=float) / counts**2
    variance = alpha2 + tau2 + counts * gamma2
    lambdas = optimal_lambdas(alpha2, tau2, counts.tolist(), gamma2.tolist())
    by_pool = {pool.id: float(value) for pool, value in zip(levels, lambdas, strict=True)}
    return DittoLambdaPrediction(
        lambdas={
            group.id: None
            if group.expected_clients <= 0 or not np.isfinite(by_pool.get(group.pool, np.nan))
            else by_pool[group.pool]
            for group in groups
        },
        assumed_ratios={pool.id: float(variance.min() / v) for pool, v in zip(levels, variance, strict=True)},
        client_variance={pool.id: float(v) for pool, v in zip(levels, variance, strict=True)},
        assumptions=DITTO_ASSUMPTIONS,
    )
