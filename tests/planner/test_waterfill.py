"""KKT water-filling (docs/planning.md §4.1) against cvxpy and against its own KKT conditions."""

from __future__ import annotations

import numpy as np
import pytest

from accounting.errors import InfeasibleError
from planner.waterfill import qp_objective, waterfill_qp

cp = pytest.importorskip("cvxpy")


def random_qp(seed: int, n: int, linear_fraction: float = 0.0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 5, n)
    b = rng.uniform(0.1, 50, n)
    b[rng.uniform(size=n) < linear_fraction] = 0.0
    w = rng.integers(1, 1000, n).astype(float)
    lo = rng.uniform(0, 0.05, n)
    hi = np.minimum(1.0, lo + rng.uniform(0.05, 1.0, n))
    total = float(np.dot(w, lo) + rng.uniform(0.05, 0.95) * np.dot(w, hi - lo))
    return a, b, w, total, lo, hi


def cvxpy_solve(a, b, w, total, lo, hi):
    x = cp.Variable(len(a))
    problem = cp.Problem(
        cp.Minimize(a @ x + cp.sum(cp.multiply(b, cp.square(x)))),
        [w @ x == total, x >= lo, x <= hi],
    )
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return np.asarray(x.value), float(problem.value)


def assert_kkt(a, b, w, total, lo, hi, x, lam):
    assert np.dot(w, x) == pytest.approx(total, rel=1e-12)
    assert np.all(x >= lo) and np.all(x <= hi)
    gradient = a + 2 * b * x - lam * w
    scale = np.abs(a) + 2 * b * np.abs(x) + abs(lam) * w + 1e-12
    interior = (x > lo + 1e-12) & (x < hi - 1e-12) & (b > 0)
    assert np.all(np.abs(gradient[interior]) <= 1e-9 * scale[interior])
    assert np.all(gradient[(x <= lo + 1e-12) & (x < hi)] >= -1e-9 * scale[(x <= lo + 1e-12) & (x < hi)])
    assert np.all(gradient[(x >= hi - 1e-12) & (x > lo)] <= 1e-9 * scale[(x >= hi - 1e-12) & (x > lo)])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("n", [1, 3, 20, 200])
def test_waterfill_matches_cvxpy_and_satisfies_kkt(seed, n):
    a, b, w, total, lo, hi = random_qp(seed, n)
    result = waterfill_qp(a, b, w, total, lo, hi)
    assert_kkt(a, b, w, total, lo, hi, result.x, result.multiplier)
    _, reference = cvxpy_solve(a, b, w, total, lo, hi)
    ours = qp_objective(a, b, result.x)
    assert ours == pytest.approx(reference, rel=1e-6)
    assert ours <= reference * (1 + 1e-9) + 1e-12  # an exact optimum is never worse than the solver


@pytest.mark.parametrize("seed", range(6))
def test_waterfill_with_linear_groups_matches_cvxpy(seed):
    a, b, w, total, lo, hi = random_qp(100 + seed, 30, linear_fraction=0.4)
    result = waterfill_qp(a, b, w, total, lo, hi)
    assert_kkt(a, b, w, total, lo, hi, result.x, result.multiplier)
    _, reference = cvxpy_solve(a, b, w, total, lo, hi)
    assert qp_objective(a, b, result.x) == pytest.approx(reference, rel=1e-6, abs=1e-9)


def test_equal_linear_groups_share_equally():
    # three identical linear groups tied at the threshold share the remainder equally
    x = waterfill_qp(np.zeros(3), np.zeros(3), np.full(3, 100.0), 30.0, np.zeros(3), np.ones(3)).x
    np.testing.assert_allclose(x, [0.1, 0.1, 0.1], rtol=1e-12)


def test_infeasible_totals_raise():
    with pytest.raises(InfeasibleError, match="lower bounds"):
        waterfill_qp(np.ones(2), np.ones(2), np.ones(2), 0.5, np.full(2, 0.5), np.ones(2))
    with pytest.raises(InfeasibleError, match="upper bounds"):
        waterfill_qp(np.ones(2), np.ones(2), np.ones(2), 3.0, np.zeros(2), np.ones(2))


def test_total_at_the_bounds_returns_the_bounds():
    lo, hi = np.array([0.1, 0.2]), np.array([0.5, 0.9])
    w = np.array([10.0, 20.0])
    np.testing.assert_array_equal(waterfill_qp(np.ones(2), np.ones(2), w, float(w @ lo), lo, hi).x, lo)
    np.testing.assert_array_equal(waterfill_qp(np.ones(2), np.ones(2), w, float(w @ hi), lo, hi).x, hi)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("n", [1, 2, 7, 500, 20_000])
def test_newton_path_equals_the_sort_path_and_satisfies_kkt(seed, n, monkeypatch):
    """The fast path (safeguarded Newton, all groups strictly convex) and the exact
    breakpoint search reach the same point; ties and bounds included."""
    import planner.waterfill as waterfill

    a, b, w, total, lo, hi = random_qp(seed, n)
    if seed % 4 == 0:  # many equal groups: ties at every breakpoint
        a[:] = a[0]
        b[:] = b[0]
        w[:] = w[0]
        total = float(np.dot(w, lo) + 0.5 * np.dot(w, hi - lo))
    fast = waterfill_qp(a, b, w, total, lo, hi)
    assert_kkt(a, b, w, total, lo, hi, fast.x, fast.multiplier)
    monkeypatch.setattr(waterfill, "_newton_multiplier", lambda *args, **kwargs: None)
    exact = waterfill_qp(a, b, w, total, lo, hi)
    np.testing.assert_allclose(fast.x, exact.x, rtol=0, atol=1e-12)
    assert qp_objective(a, b, fast.x) == pytest.approx(qp_objective(a, b, exact.x), rel=1e-12)
