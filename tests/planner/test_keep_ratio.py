"""auto keep ratio (docs/planning.md §5): the closed form and the alternation."""

from __future__ import annotations

import numpy as np
import pytest

from planner import make_plan
from planner.methods import design
from planner.objective import objective_terms, optimal_keep_ratio
from planner.problem import build_problem
from tests.planner.conftest import worked_scenario


@pytest.mark.parametrize("beta", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_optimal_keep_ratio_matches_brute_force(beta):
    rng = np.random.default_rng(int(beta * 10))
    a = rng.uniform(0, 5, 50)
    b = rng.uniform(0, 5, 50)
    kappa = optimal_keep_ratio(a, b, beta, 0.01)
    grid = np.linspace(0.01, 1, 20001)
    values = a[:, None] * (1 - grid[None, :]) ** beta + b[:, None] * grid[None, :]
    best = values.min(axis=1)
    ours = a * (1 - kappa) ** beta + b * kappa
    assert np.all(ours <= best + 1e-9)


def test_beta_two_closed_form():
    a, b = np.array([2.0, 1.0, 0.1]), np.array([1.0, 3.0, 0.001])
    expected = np.clip(1 - b / (2 * a), 0.05, 1)
    np.testing.assert_allclose(optimal_keep_ratio(a, b, 2.0, 0.05), expected, rtol=1e-12)
    assert optimal_keep_ratio(np.array([0.0]), np.array([1.0]), 2.0, 0.05)[0] == 0.05
    assert optimal_keep_ratio(np.array([1.0]), np.array([0.0]), 2.0, 0.05)[0] == 1.0


def test_auto_alternation_never_increases_the_objective():
    scenario = worked_scenario(1, keep_ratio="auto", model_dim=1_000_000, update_norm_bound=3.0)
    d = design(build_problem(scenario), "gdpfed_plus")
    history = d.history
    assert len(history) >= 3  # at least one kappa-step and one q-step after the first q-step
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in zip(history, history[1:]))
    assert history[-1] < history[0]


def test_auto_plan_reports_the_objective_at_its_keep_ratios():
    scenario = worked_scenario(1, keep_ratio="auto", model_dim=1_000_000, update_norm_bound=3.0)
    plan = make_plan(scenario, "gdpfed_plus")
    keep = np.array([p.keep_ratio for p in plan.pools])
    assert np.all(keep < 1) and np.all(keep >= scenario.min_keep_ratio)
    terms = objective_terms(
        np.array([p.expected_clients for p in plan.pools]),
        np.array([p.noise_std for p in plan.pools]),
        keep,
        expected_clients=30,
        model_dim=1_000_000,
        update_norm_bound=3.0,
        sparsity_exponent=2.0,
        bias_weight=1.0,
    )
    assert plan.predicted.objective == pytest.approx(terms.objective, rel=1e-12)
    # each pool's kappa is (close to) the closed form at the final rates
    a = 9.0 * np.array([p.expected_clients for p in plan.pools]) / 30
    b = 1_000_000 * np.array([p.noise_std for p in plan.pools]) ** 2 / 900
    np.testing.assert_allclose(keep, np.clip(1 - b / (2 * a), 0.01, 1), rtol=0.02)
    # sparsifying beats keeping everything on this objective
    dense = make_plan(worked_scenario(1, model_dim=1_000_000, update_norm_bound=3.0), "gdpfed_plus")
    assert plan.predicted.objective < dense.predicted.objective


def test_fixed_per_group_keep_ratio_is_used():
    scenario = worked_scenario(
        1,
        groups=[
            {"id": "a", "epsilon": 1.0, "num_clients": 100, "keep_ratio": 0.1},
            {"id": "b", "epsilon": 2.0, "num_clients": 100},
            {"id": "c", "epsilon": 4.0, "num_clients": 100, "keep_ratio": 0.5},
        ],
    )
    plan = make_plan(scenario, "gdpfed_plus")
    assert [plan.pool(g.pool).keep_ratio for g in plan.groups] == [0.1, 1.0, 0.5]
