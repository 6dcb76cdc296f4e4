"""Water-filling on convexified curves (docs/planning.md §4.2) and the noise curves."""

from __future__ import annotations

import numpy as np
import pytest

import accounting
from planner.allocate import allocate
from planner.curves import build_curves, rate_grid
from planner.waterfill import qp_objective, waterfill_qp


@pytest.mark.parametrize("seed", range(5))
def test_allocate_equals_kkt_on_convex_quadratics(seed):
    rng = np.random.default_rng(seed)
    n = 40
    a, b = rng.uniform(0, 5, n), rng.uniform(0.1, 50, n)
    w = rng.integers(1, 1000, n).astype(float)
    lo = rng.uniform(0, 0.05, n)
    hi = np.minimum(1, lo + rng.uniform(0.05, 1, n))
    total = float(w @ lo + 0.4 * (w @ (hi - lo)))
    exact = waterfill_qp(a, b, w, total, lo, hi).x
    ours = allocate(lambda x: a[:, None] * x + b[:, None] * x * x, w, total, lo, hi).x
    assert float(w @ ours) == pytest.approx(total, rel=1e-12)
    assert np.all(ours >= lo) and np.all(ours <= hi)
    assert qp_objective(a, b, ours) == pytest.approx(qp_objective(a, b, exact), rel=1e-8)


def test_allocate_finds_the_global_optimum_of_a_nonconvex_problem():
    # f(x) = sqrt(x) (concave) for item 0 and x^2 for item 1: the optimum puts item 0 at an end
    def cost(x):
        out = np.empty_like(x)
        out[0] = np.sqrt(x[0]) * 3
        out[1] = 4 * x[1] ** 2
        return out

    result = allocate(cost, np.ones(2), 1.0, np.zeros(2), np.ones(2)).x
    grid = np.linspace(0, 1, 100_001)
    brute = min(3 * np.sqrt(grid) + 4 * (1 - grid) ** 2)
    value = 3 * np.sqrt(result[0]) + 4 * result[1] ** 2
    assert value <= brute + 1e-6
    assert result.sum() == pytest.approx(1.0, rel=1e-12)


def test_noise_curves_interpolate_exact_calibrations_closely():
    eps = np.array([0.5, 2.0, 8.0])
    grid = rate_grid(0.005, points_per_decade=5)
    table = accounting.noise_multipliers_rdp(grid[:, None], 100, eps[None, :], 1e-3)
    curves = build_curves(grid, table, np.ones(3))
    q = np.array([0.0123, 0.077, 0.41])
    exact = accounting.noise_multipliers_rdp(q, 100, eps, 1e-3)
    np.testing.assert_allclose(curves.std(q), exact, rtol=0.01)
    # monotone, and the inverse is consistent
    dense = np.geomspace(0.005, 1, 400)
    values = curves.std(np.tile(dense, (3, 1)))
    assert np.all(np.diff(values, axis=1) >= 0)
    np.testing.assert_allclose(curves.std(curves.rate_for_std(exact)), exact, rtol=1e-9)
