"""FedHDP's closed forms against Monte Carlo on the point-estimation model
(planner/fedhdp.py, docs/planning.md §14, ../shared/design/fedhdp.md §2.1 and §2.7)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.fedhdp import (
    level_ratios,
    optimal_lambda_private,
    optimal_lambdas,
    optimal_ratio,
    optimal_server_mse,
    pool_ratio,
    server_mse,
)

ALPHA2, TAU2, GAMMA2 = 1.0, 0.5, 0.2
OPTOUT, PRIVATE = 10, 30  # N = 40, rho_np = 0.25
TRIALS = 100_000


def simulate(counts, gamma2, trials=TRIALS, seed=0):
    """``(phi_j, phi_hat_j, psi_j)`` for every client, ``[trials, N]``, with ``phi = 0``."""
    rng = np.random.default_rng(seed)
    level = np.repeat(np.arange(len(counts)), counts)
    personal = rng.normal(0.0, np.sqrt(TAU2), (trials, level.size))
    local = personal + rng.normal(0.0, np.sqrt(ALPHA2), (trials, level.size))
    noise_std = np.sqrt(np.asarray(counts, dtype=float) * np.asarray(gamma2, dtype=float))[level]
    sent = local + rng.normal(0.0, 1.0, (trials, level.size)) * noise_std
    return level, personal, local, sent


def test_server_mse_is_minimised_at_r_star_and_equals_lemma_1():
    _, _, _, sent = simulate([OPTOUT, PRIVATE], [0.0, GAMMA2])
    sigma_c2 = ALPHA2 + TAU2
    best = optimal_ratio(sigma_c2, PRIVATE, GAMMA2)

    def mc_mse(r):
        weights = np.r_[np.ones(OPTOUT), np.full(PRIVATE, r)]
        estimate = sent @ weights / weights.sum()
        return float(np.mean(estimate**2)), float(np.std(estimate**2) / np.sqrt(TRIALS))

    at_best, error = mc_mse(best)
    assert at_best == pytest.approx(optimal_server_mse(sigma_c2, OPTOUT, PRIVATE, GAMMA2), abs=3 * error)
    assert optimal_server_mse(sigma_c2, OPTOUT, PRIVATE, GAMMA2) == pytest.approx(
        server_mse(best, sigma_c2, OPTOUT, PRIVATE, GAMMA2), rel=1e-12
    )
    for r in (0.0, best / 3, best * 3, 1.0):
        assert server_mse(r, sigma_c2, OPTOUT, PRIVATE, GAMMA2) > server_mse(best, sigma_c2, OPTOUT, PRIVATE, GAMMA2)
        assert mc_mse(r)[0] == pytest.approx(server_mse(r, sigma_c2, OPTOUT, PRIVATE, GAMMA2), rel=0.02)


def test_lemma_2_gaps():
    n, rho, sigma_c2 = OPTOUT + PRIVATE, OPTOUT / (OPTOUT + PRIVATE), ALPHA2 + TAU2
    optimum = optimal_server_mse(sigma_c2, OPTOUT, PRIVATE, GAMMA2)
    denominator = sigma_c2 + rho * (1 - rho) * GAMMA2 * n
    hdp_gap = rho * (1 - rho) ** 3 * GAMMA2**2 * n**2 / denominator / n
    assert server_mse(1.0, sigma_c2, OPTOUT, PRIVATE, GAMMA2) - optimum == pytest.approx(hdp_gap, rel=1e-10)
    dp_fedavg = (sigma_c2 + PRIVATE * GAMMA2) / n  # everyone private, equal weights
    dp_gap = (rho * (1 - rho) * sigma_c2 * GAMMA2 + rho * (1 - rho) ** 2 * GAMMA2**2 * n) / denominator
    assert dp_fedavg - optimum == pytest.approx(dp_gap, rel=1e-10)


def best_personal_lambda(level, personal, local, sent, ratios, client):
    """The lambda minimising client ``client``'s MSE by MC, with the paper's own-term
    convention: its own term in the global model is its noise-free local mean."""
    weights = np.asarray(ratios)[level]
    weights = weights / weights.sum()
    own = sent.copy()
    own[:, client] = local[:, client]
    global_model = own @ weights
    # personal = c local + (1 - c) global with c = 1 / (1 + lambda): quadratic in c
    gap = global_model - local[:, client]
    c = float(np.mean((global_model - personal[:, client]) * gap) / np.mean(gap**2))
    return 1.0 / c - 1.0


def test_lambda_star_minimises_each_clients_mse_two_levels():
    counts, gamma2 = [OPTOUT, PRIVATE], [0.0, GAMMA2]
    level, personal, local, sent = simulate(counts, gamma2)
    ratios = level_ratios(ALPHA2, TAU2, counts, gamma2)
    assert ratios[1] == pytest.approx(optimal_ratio(ALPHA2 + TAU2, PRIVATE, GAMMA2))
    lambdas = optimal_lambdas(ALPHA2, TAU2, counts, gamma2)
    assert lambdas[0] == pytest.approx(ALPHA2 / TAU2)  # (17)
    assert lambdas[1] == pytest.approx(optimal_lambda_private(ALPHA2, TAU2, GAMMA2, OPTOUT + PRIVATE, 0.25))  # (18)
    for client, expected in ((0, lambdas[0]), (OPTOUT, lambdas[1])):
        assert best_personal_lambda(level, personal, local, sent, ratios, client) == pytest.approx(expected, rel=0.05)


def test_lambda_star_three_levels():
    counts, gamma2 = [8, 12, 20], [0.0, 0.05, 0.3]
    level, personal, local, sent = simulate(counts, gamma2, seed=1)
    ratios = level_ratios(ALPHA2, TAU2, counts, gamma2)
    lambdas = optimal_lambdas(ALPHA2, TAU2, counts, gamma2)
    for client, expected in ((0, lambdas[0]), (8, lambdas[1]), (20, lambdas[2])):
        assert best_personal_lambda(level, personal, local, sent, ratios, client) == pytest.approx(expected, rel=0.05)


def test_special_cases_of_eq_18():
    # no opted-out clients: alpha2 / (tau2 + gamma2); (almost) all opted out: Ditto's alpha2 / tau2
    assert optimal_lambda_private(ALPHA2, TAU2, GAMMA2, 40, 0.0) == pytest.approx(ALPHA2 / (TAU2 + GAMMA2))
    assert optimal_lambda_private(ALPHA2, TAU2, GAMMA2, 40, 1.0) == pytest.approx(ALPHA2 / TAU2)


def test_pool_ratio_weighs_dispersion_against_noise():
    assert pool_ratio(0.0, 100, 1.0, 10) == 0.0
    assert pool_ratio(1.0, 100, 0.0, 10) == 1.0
    # the design note's order of magnitude: d 4e4, V 0.2, s = 4 x 0.5, K 96 -> about 1e-4
    assert pool_ratio(0.2, 40_000, 2.0, 96) == pytest.approx(1.2e-4, rel=0.01)


def test_plans_predict_ratios_from_update_dispersion_without_changing_privacy():
    from planner import make_plan
    from planner.schema import Scenario

    base = dict(groups=[{"id": "private", "epsilon": 3.6, "num_clients": 190}, {"id": "out", "epsilon": None, "num_clients": 10}],
                delta=1e-4, rounds=25, clip_norm=1.0, model_dim=1210, expected_clients=40)
    plain = make_plan(Scenario(**base), "gdpfed", clients_needed=False)
    assert plain.predicted.fedhdp is None
    plan = make_plan(Scenario(**base, update_dispersion=0.3), "gdpfed", clients_needed=False)
    advice = plan.predicted.fedhdp
    assert advice is not None
    private_pool = plan.group("private").pool
    out_pool = plan.group("out").pool
    pool = plan.pool(private_pool)
    assert advice.ratios[private_pool] == pytest.approx(pool_ratio(0.3, 1210, pool.noise_std, pool.expected_clients))
    assert advice.ratios[out_pool] == 1.0
    assert sum(advice.aggregation_weights.values()) == pytest.approx(1.0)
    # post-processing: every privacy number is the same
    assert [g.epsilon_spent for g in plan.groups] == [g.epsilon_spent for g in plain.groups]
    assert [p.noise_multiplier for p in plan.pools] == [p.noise_multiplier for p in plain.pools]
    # r -> 1 (huge dispersion): the plan's own noise energy and weights
    near_one = make_plan(Scenario(**base, update_dispersion=1e11), "gdpfed", clients_needed=False).predicted.fedhdp
    assert near_one is not None
    assert near_one.noise_energy == pytest.approx(plain.predicted.noise_energy, rel=1e-5)
    assert near_one.aggregation_weights["private"] == pytest.approx(plain.group("private").aggregation_weight, rel=1e-5)
    # no dispersion: the noised pool gets no weight
    zero = make_plan(Scenario(**base, update_dispersion=0.0), "gdpfed", clients_needed=False).predicted.fedhdp
    assert zero is not None and zero.ratios[private_pool] == 0.0 and zero.aggregation_weights["out"] == pytest.approx(1.0)


DITTO_BASE = dict(groups=[{"id": "private", "epsilon": 3.6, "num_clients": 190}, {"id": "out", "epsilon": None, "num_clients": 10}],
                  delta=1e-4, rounds=25, clip_norm=1.0, model_dim=1210, expected_clients=40)


def test_plans_report_ditto_lambdas_from_the_model_inputs():
    """lambda* per group from the scenario's alpha^2 and tau^2 equals the paper's (17) and (18)
    with the plan's pools as the two levels (K_P clients each, per-client noise s_P^2 / K_P)."""
    from planner import make_plan
    from planner.schema import Scenario

    plain = make_plan(Scenario(**DITTO_BASE), "gdpfed", clients_needed=False)
    assert plain.predicted.ditto_lambdas is None  # no inputs, no advice and no error
    alpha2, tau2 = 2e-4, 5e-5
    scenario = Scenario(**DITTO_BASE, sampling_variance_per_coordinate=alpha2, heterogeneity_variance_per_coordinate=tau2)
    plan = make_plan(scenario, "gdpfed", clients_needed=False)
    advice = plan.predicted.ditto_lambdas
    assert advice is not None and "point-estimation" in advice.assumptions
    private, out = plan.pool(plan.group("private").pool), plan.pool(plan.group("out").pool)
    total = private.expected_clients + out.expected_clients
    gamma2 = private.noise_std**2 / private.expected_clients**2
    assert advice.lambdas["private"] == pytest.approx(
        optimal_lambda_private(alpha2, tau2, gamma2, total, out.expected_clients / total), rel=1e-9
    )
    assert advice.lambdas["out"] == pytest.approx(alpha2 / tau2, rel=1e-9)  # (17)
    assert advice.client_variance[private.id] == pytest.approx(alpha2 + tau2 + private.noise_std**2 / private.expected_clients)
    assert advice.assumed_ratios[out.id] == 1.0
    # the assumed ratio is the plan's r* for an update dispersion V = d (alpha^2 + tau^2)
    assert advice.assumed_ratios[private.id] == pytest.approx(
        pool_ratio(1210 * (alpha2 + tau2), 1210, private.noise_std, private.expected_clients), rel=1e-9
    )
    assert [g.epsilon_spent for g in plan.groups] == [g.epsilon_spent for g in plain.groups]
    # nonprivate: every level noiseless, Ditto's homogeneous lambda* is finite and positive
    nonprivate = make_plan(scenario, "nonprivate", clients_needed=False).predicted.ditto_lambdas
    assert nonprivate is not None and all(v is not None and v > 0 for v in nonprivate.lambdas.values())


@pytest.mark.parametrize(("given", "missing"), [
    ({"sampling_variance_per_coordinate": 1e-3}, "heterogeneity_variance_per_coordinate"),
    ({"heterogeneity_variance_per_coordinate": 1e-3}, "sampling_variance_per_coordinate"),
    ({"sampling_variance_per_coordinate": 0.0, "heterogeneity_variance_per_coordinate": 1e-3}, "sampling_variance_per_coordinate"),
])
def test_ditto_model_inputs_are_validated(given, missing):
    from pydantic import ValidationError

    from planner.schema import Scenario

    with pytest.raises(ValidationError, match=missing):
        Scenario(**DITTO_BASE, **given)
