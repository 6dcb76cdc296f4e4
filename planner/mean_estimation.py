"""MR-MTL on personalised mean estimation: the closed forms of the paper's section 6.

(docs/mrmtl.md §3.) K silos with n points each, ``x_{k,i} = w_k + N(0, sigma^2)`` and
``w_k = theta + N(0, tau^2)``; each silo releases its clipped sum with Gaussian noise of
std ``sigma_dp`` (one step, sampling rate 1), so its private mean has variance
``sigma_loc^2 = sigma^2 / n + sigma_dp^2 / n^2``. MR-MTL's personal estimate minimises
``h_k(w) = (w - hat w_k)^2 + lambda (w - bar w)^2`` over w with ``bar w`` the mean of all
private means. Everything here is plain arithmetic (no torch): the planner uses it for
the advisory ``lambda*`` of a silo plan, the tests check it against direct minimisation
and Monte Carlo.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def local_variance(data_variance: float, num_samples: float, dp_noise_std: float = 0.0) -> float:
    """sigma_loc^2 = sigma^2 / n + sigma_dp^2 / n^2 (eq. (5), docs/mrmtl.md §3.1)."""
    return data_variance / num_samples + dp_noise_std**2 / num_samples**2


def personal_weight(num_silos: int, prox: float) -> float:
    """alpha = (K + lambda) / ((1 + lambda) K): Lemma 6.1's weight on the silo's own mean."""
    return (num_silos + prox) / ((1.0 + prox) * num_silos)


def mrmtl_estimate(own_mean: float, others_mean: float, num_silos: int, prox: float) -> float:
    """argmin_w h_k(w) = alpha hat w_k + (1 - alpha) hat w_{\\k} (Lemma 6.1, docs/mrmtl.md §3.2)."""
    alpha = personal_weight(num_silos, prox)
    return alpha * own_mean + (1.0 - alpha) * others_mean


def optimal_prox(local_var: float, task_variance: float) -> float:
    """lambda* = sigma_loc^2 / tau^2 (Theorem 6.3): grows as privacy tightens."""
    return local_var / task_variance


def bayes_error(num_silos: int, local_var: float, task_variance: float) -> float:
    """sigma_w^2 = (1/sigma_loc^2 + (K-1)/(K tau^2 + sigma_loc^2))^-1 (Lemma 6.2), which is
    also E(lambda*) (Cor. 6.4)."""
    return 1.0 / (1.0 / local_var + (num_silos - 1) / (num_silos * task_variance + local_var))


def expected_error(num_silos: int, local_var: float, task_variance: float, prox: float) -> float:
    """E(lambda) = (1 - 1/K)(sigma_loc^2 + lambda^2 tau^2)/(lambda + 1)^2 + sigma_loc^2 / K
    (Lemma 6.7): the mean squared error of MR-MTL's estimate of w_k."""
    k = num_silos
    return (1 - 1 / k) * (local_var + prox**2 * task_variance) / (prox + 1) ** 2 + local_var / k


def local_gap(num_silos: int, local_var: float, task_variance: float) -> float:
    """Delta_loc = (1 - 1/K) sigma_loc^4 / (sigma_loc^2 + tau^2) (Prop. 6.5): local error - E*."""
    return (1 - 1 / num_silos) * local_var**2 / (local_var + task_variance)


def federated_gap(num_silos: int, local_var: float, task_variance: float) -> float:
    """Delta_fed = (1 - 1/K) tau^4 / (sigma_loc^2 + tau^2) (Prop. 6.6): FedAvg error - E*."""
    return (1 - 1 / num_silos) * task_variance**2 / (local_var + task_variance)


def privacy_cost(num_silos: int, num_samples: float, dp_noise_std: float, prox: float) -> float:
    """Delta_DP(lambda) = (1 - 1/K) sigma_dp^2 / (n^2 (lambda+1)^2) + sigma_dp^2 / (K n^2)
    (Theorem 6.8): what DP adds to E(lambda); it shrinks by up to a factor K as lambda grows."""
    k, n = num_silos, num_samples
    return (1 - 1 / k) * dp_noise_std**2 / (n**2 * (prox + 1) ** 2) + dp_noise_std**2 / (k * n**2)


def silo_optimal_prox(
    local_vars: np.ndarray | list[float], task_variance: float
) -> tuple[np.ndarray, np.ndarray]:
    """Silo-specific lambda_k* and the server weights a_k it assumes (docs/mrmtl.md §3.3) [recon].

    pi_j = 1/(tau^2 + sigma_loc,j^2), a_k = pi_k / sum pi, V_{\\k} = 1/sum_{j != k} pi_j,
    rho_k = sigma_loc,k^2/(tau^2 + V_{\\k}), lambda_k* = rho_k / (1 - a_k (1 + rho_k)).
    Bayes-optimal when the server mean weights silos by ``a``; with equal silos it is
    sigma_loc^2/tau^2 and ``a = 1/K``. Needs K >= 2.
    """
    local = np.asarray(local_vars, dtype=float)
    if local.size < 2:
        raise ValueError("silo-specific lambda* needs at least two silos")
    precision = 1.0 / (task_variance + local)
    weights = precision / precision.sum()
    others = 1.0 / (precision.sum() - precision)
    rho = local / (task_variance + others)
    return rho / (1.0 - weights * (1.0 + rho)), weights


def simulate(
    rng: np.random.Generator,
    *,
    num_silos: int,
    num_samples: int,
    data_std: float,
    task_std: float,
    dp_noise_std: float,
    prox: float | np.ndarray,
    trials: int,
    clip: float | None = None,
) -> dict[str, np.ndarray]:
    """Monte Carlo of the toy: squared errors of MR-MTL (at each ``prox``), local and FedAvg.

    Each trial draws theta-free tasks ``w_k ~ N(0, tau^2)``, data, the silo's noisy sum
    (points clipped to ``[-clip, clip]`` when ``clip`` is given, as the mechanism's
    sensitivity needs) and the estimates. Returns ``{"mrmtl": [len(prox)], "local",
    "fedavg"}``, each the error averaged over silos and trials.
    """
    proxes = np.atleast_1d(np.asarray(prox, dtype=float))
    k, n = num_silos, num_samples
    errors = {"mrmtl": np.zeros(proxes.size), "local": np.zeros(1), "fedavg": np.zeros(1)}
    done = 0
    while done < trials:
        batch = min(20000 if clip is None else 500, trials - done)
        tasks = rng.normal(0.0, task_std, size=(batch, k))
        if clip is None:  # the sum of n points is sufficient: N(n w_k, n sigma^2)
            sums = n * tasks + rng.normal(0.0, data_std * np.sqrt(n), size=(batch, k))
        else:
            points = tasks[..., None] + rng.normal(0.0, data_std, size=(batch, k, n))
            sums = np.clip(points, -clip, clip).sum(-1)
        means = (sums + rng.normal(0.0, dp_noise_std, size=(batch, k))) / n
        total = means.sum(-1, keepdims=True)
        others = (total - means) / (k - 1)
        errors["local"] += ((means - tasks) ** 2).mean(-1).sum()
        errors["fedavg"] += ((total / k - tasks) ** 2).mean(-1).sum()
        for index, lam in enumerate(proxes):
            estimate = mrmtl_estimate(means, others, k, float(lam))  # type: ignore[arg-type]
            errors["mrmtl"][index] += ((estimate - tasks) ** 2).mean(-1).sum()
        done += batch
    return {name: value / trials for name, value in errors.items()}


def iterated_coefficients(
    *,
    num_silos: int,
    num_samples: int,
    data_std: float,
    task_std: float,
    step_noise_std: float,
    prox: float,
    lr: float,
    rounds: int,
    steps_per_round: int = 1,
    method: str = "mrmtl",
) -> tuple[np.ndarray, np.ndarray]:
    """The trainer's iterated MR-MTL on the toy, as coefficients (docs/mrmtl.md §3.4).

    The DP-SGD engine at sampling rate 1 (batch n, every example every step), no clipping
    active, per-example loss ``(w - x)^2 / 2`` (the engine's regression loss), from w = 0:
    each step every silo takes ``w_k <- w_k - lr ((w_k - xbar_k) + xi_k / n + prox (w_k - a))``
    with ``xi_k ~ N(0, step_noise_std^2)`` fresh per step (``step_noise_std = sigma_k c``)
    and the anchor ``a`` the server mean of the last round, fixed within a round.
    ``method`` ``mrmtl`` (personal models; ``prox`` 0 is local training) or ``fedavg``
    (every silo starts from the mean each round and is evaluated with it).

    Everything is linear in independent standard normals: K task draws
    (``w_k = task_std z_k``), K data-mean draws (``xbar_k = w_k + data_std / sqrt(n) e_k``),
    then K noise draws per step, in that order. Returns ``(final, true)``, each ``[K, 2K +
    K rounds steps_per_round]``: the coefficients of every silo's evaluated model after the
    last round and of its true mean.
    """
    if method not in ("mrmtl", "fedavg"):
        raise ValueError(f"method must be mrmtl or fedavg, got {method!r}")
    k, n = num_silos, num_samples
    steps = rounds * steps_per_round
    width = 2 * k + k * steps
    true = np.zeros((k, width))
    true[:, :k] = np.eye(k) * task_std
    xbar = true.copy()
    xbar[:, k:2 * k] = np.eye(k) * data_std / np.sqrt(n)
    weights = np.zeros((k, width))
    anchor = np.zeros(width)
    step = 0
    for _ in range(rounds):
        if method == "fedavg":
            weights = np.tile(anchor, (k, 1))
        for _ in range(steps_per_round):
            noise = np.zeros((k, width))
            noise[np.arange(k), 2 * k + k * step + np.arange(k)] = step_noise_std / n
            weights = weights - lr * ((weights - xbar) + noise + prox * (weights - anchor))
            step += 1
        anchor = weights.mean(axis=0)
    final = np.tile(anchor, (k, 1)) if method == "fedavg" else weights
    return final, true


def iterated_error(**sizes: Any) -> float:
    """E[(w_k^T - w_k)^2] averaged over silos for ``iterated_coefficients(**sizes)``: the
    exact mean squared error of the trainer's algorithm (a sum of squared coefficients, no
    sampling; docs/mrmtl.md §3.4)."""
    final, true = iterated_coefficients(**sizes)
    return float(((final - true) ** 2).sum(axis=1).mean())
