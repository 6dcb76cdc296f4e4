"""Section 6 of the MR-MTL paper: closed forms against direct minimisation and Monte Carlo
(docs/mrmtl.md §3), at the design note's anchor K=20, n=200, sigma=0.4, tau=0.08, c=1,
eps=0.25, delta=1e-5."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from accounting import noise_multiplier
from planner import mean_estimation as toy

K, N, SIGMA, TAU, EPS, DELTA = 20, 200, 0.4, 0.08, 0.25, 1e-5


@pytest.fixture(scope="module")
def dp_std() -> float:
    # the toy's mechanism: the silo's clipped sum released once (rate 1, one step), clip c = 1
    return float(noise_multiplier(1.0, 1, EPS, DELTA, "rdp").noise_multiplier)


def random_settings(seed: int) -> tuple[int, float, float]:
    rng = np.random.default_rng(seed)
    return int(rng.integers(2, 50)), float(rng.uniform(1e-4, 1.0)), float(rng.uniform(1e-4, 1.0))


@pytest.mark.parametrize("seed", range(5))
def test_lemma_6_1_is_the_minimiser_of_h_k(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 30))
    means = rng.normal(size=k)
    prox = float(rng.uniform(0, 5))
    bar = means.mean()  # the server mean of every silo's private estimate

    def h(w: float) -> float:  # silo 0's objective
        return float((w - means[0]) ** 2 + prox * (w - bar) ** 2)

    found = minimize_scalar(h, bracket=(-10, 10), tol=1e-12).x
    others = (means.sum() - means[0]) / (k - 1)
    assert found == pytest.approx(toy.mrmtl_estimate(means[0], others, k, prox), abs=1e-7)


@pytest.mark.parametrize("seed", range(10))
def test_expected_error_is_minimised_at_lambda_star_and_equals_the_bayes_error(seed: int) -> None:
    k, local, task = random_settings(seed)
    star = toy.optimal_prox(local, task)
    found = minimize_scalar(lambda lam: toy.expected_error(k, local, task, lam), bounds=(0, 1e4), method="bounded",
                            options={"xatol": 1e-10}).x
    assert found == pytest.approx(star, rel=1e-4, abs=1e-6)
    assert toy.expected_error(k, local, task, star) == pytest.approx(toy.bayes_error(k, local, task), rel=1e-12)
    # Props 6.5 and 6.6: the endpoints' gaps (local: lambda = 0; FedAvg: lambda -> infinity)
    e_star = toy.bayes_error(k, local, task)
    assert toy.expected_error(k, local, task, 0.0) - e_star == pytest.approx(toy.local_gap(k, local, task), rel=1e-9)
    fedavg = (1 - 1 / k) * task + local / k
    assert fedavg - e_star == pytest.approx(toy.federated_gap(k, local, task), rel=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_privacy_cost_is_what_dp_adds_to_the_error(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k, n = int(rng.integers(2, 50)), int(rng.integers(10, 1000))
    data_var, task, dp, lam = rng.uniform(0.01, 1), rng.uniform(1e-3, 1), rng.uniform(0.1, 30), rng.uniform(0, 10)
    private = toy.expected_error(k, toy.local_variance(data_var, n, dp), task, lam)
    public = toy.expected_error(k, toy.local_variance(data_var, n), task, lam)
    assert private - public == pytest.approx(toy.privacy_cost(k, n, dp, lam), rel=1e-9)
    # the cost shrinks towards 1/K of its lambda = 0 value as lambda grows
    assert toy.privacy_cost(k, n, dp, 1e9) == pytest.approx(toy.privacy_cost(k, n, dp, 0) / k, rel=1e-6)


def test_silo_specific_lambda_reduces_to_the_uniform_one_for_equal_silos() -> None:
    stars, weights = toy.silo_optimal_prox([0.3] * 7, 0.05)
    assert np.allclose(stars, 0.3 / 0.05, rtol=1e-12)
    assert np.allclose(weights, 1 / 7)


def test_anchor_values(dp_std: float) -> None:
    assert dp_std == pytest.approx(14.57, abs=0.01)
    assert toy.optimal_prox(toy.local_variance(SIGMA**2, N), TAU**2) == pytest.approx(0.125, rel=1e-9)
    local = toy.local_variance(SIGMA**2, N, dp_std)
    assert toy.optimal_prox(local, TAU**2) == pytest.approx(0.954, abs=5e-4)
    assert toy.bayes_error(K, local, TAU**2) == pytest.approx(3.27e-3, abs=5e-6)
    assert local == pytest.approx(6.11e-3, abs=5e-6)  # local training's error
    assert (1 - 1 / K) * TAU**2 + local / K == pytest.approx(6.39e-3, abs=5e-6)  # FedAvg's


def test_monte_carlo_at_the_anchor(dp_std: float) -> None:
    local = toy.local_variance(SIGMA**2, N, dp_std)
    star = toy.optimal_prox(local, TAU**2)
    lambdas = np.array([0.0, star / 3, star, 3 * star])
    errors = toy.simulate(np.random.default_rng(0), num_silos=K, num_samples=N, data_std=SIGMA, task_std=TAU,
                          dp_noise_std=dp_std, prox=lambdas, trials=100_000)
    # each error is a mean of 2e6 squared Gaussians (relative sd ~ 1e-3): 1% is > 5 sd
    for lam, value in zip(lambdas, errors["mrmtl"]):
        assert value == pytest.approx(toy.expected_error(K, local, TAU**2, lam), rel=0.01)
    assert errors["local"][0] == pytest.approx(local, rel=0.01)
    assert errors["fedavg"][0] == pytest.approx((1 - 1 / K) * TAU**2 + local / K, rel=0.01)
    assert errors["mrmtl"][2] < 0.6 * min(errors["local"][0], errors["fedavg"][0])
    assert errors["mrmtl"][2] == min(errors["mrmtl"])


def test_silo_specific_lambda_beats_its_neighbours_by_monte_carlo() -> None:
    rng = np.random.default_rng(1)
    task = 0.02
    local = np.array([0.002, 0.004, 0.01, 0.03, 0.08, 0.2])
    stars, weights = toy.silo_optimal_prox(local, task)
    trials = 200_000
    tasks = rng.normal(0, np.sqrt(task), size=(trials, local.size))
    means = tasks + rng.normal(0, np.sqrt(local), size=(trials, local.size))
    bar = means @ weights  # the server mean weighted by precision

    def error(lams: np.ndarray) -> np.ndarray:
        # MR-MTL's estimate at the fixed point of h_k: (m_k + lambda_k bar_{w_k}) with bar
        # containing the silo's own estimate: w = (m_k + lam (bar - a_k m_k + a_k w)) / (1 + lam)
        estimate = (means + lams * (bar[:, None] - weights * means)) / (1 + lams - lams * weights)
        return ((estimate - tasks) ** 2).mean(0)

    best = error(stars)
    for factor in (0.5, 2.0):
        assert np.all(best < error(stars * factor))


@pytest.mark.parametrize("prox", [0.5, 1.0, 2.0, 4.0])
def test_iterated_error_reaches_the_stationary_form(prox: float) -> None:
    """docs/mrmtl.md §3.4: at lr (1 + lambda) = 1, one step a round, many rounds, the trainer's
    iterated MR-MTL has Lemma 6.7's error with the DP term's (2 lambda + lambda^2) / K
    replaced by lambda^2 / (K (1 + 2 lambda)), so it is below E(lambda) at the same sigma_DP."""
    k, n, data_std, task_std, dp_std = 20, 200, 0.4, 0.08, 14.57
    error = toy.iterated_error(num_silos=k, num_samples=n, data_std=data_std, task_std=task_std, step_noise_std=dp_std,
                           prox=prox, lr=1 / (1 + prox), rounds=120)
    stationary = ((data_std**2 / n) * (1 + 2 * prox / k + prox**2 / k) + prox**2 * task_std**2 * (1 - 1 / k)
                  + (dp_std / n) ** 2 * (1 + prox**2 / (k * (1 + 2 * prox)))) / (1 + prox) ** 2
    assert error == pytest.approx(stationary, rel=1e-9)
    assert error < toy.expected_error(k, toy.local_variance(data_std**2, n, dp_std), task_std**2, prox)
