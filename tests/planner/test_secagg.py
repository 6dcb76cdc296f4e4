"""Secure-aggregation thresholds (docs/planning.md §6): exact CDF, normal approximation, edges."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

from planner.secagg import secagg_threshold, survivor_distribution


def full_cdf_below(counts, rates):
    """P(S < m) for every m by brute-force convolution of the full binomial pmfs."""
    pmf = np.ones(1)
    for n, r in zip(counts, rates):
        pmf = np.convolve(pmf, stats.binom.pmf(np.arange(n + 1), n, r))
    return np.concatenate([[0.0], np.cumsum(pmf)])


CASES = [
    ([100, 100, 100], [0.02, 0.06, 0.22], 0.0, 0.01),
    ([100], [0.1], 0.0, 0.01),
    ([50, 500, 80], [0.3, 0.01, 0.5], 0.1, 0.05),
    ([1000, 2000], [0.05, 0.02], 0.2, 0.001),
    ([7], [0.9], 0.0, 0.2),
]


@pytest.mark.parametrize("counts, rates, dropout, alpha", CASES)
def test_threshold_is_the_largest_m_meeting_the_abort_probability(counts, rates, dropout, alpha):
    result = secagg_threshold(counts, rates, dropout, alpha, method="exact")
    survival = [r * (1 - dropout) for r in rates]
    cdf_below = full_cdf_below(counts, survival)
    m = result.threshold
    assert result.meets_target
    assert cdf_below[m] <= alpha
    assert m + 1 >= len(cdf_below) or cdf_below[m + 1] > alpha
    # windows leave out at most alpha * 1e-6 of lower-tail mass, added back conservatively
    assert result.abort_probability == pytest.approx(cdf_below[m], rel=1e-9, abs=alpha * 1e-6)
    assert result.abort_probability >= cdf_below[m] - 1e-15  # reported value is an upper bound


@pytest.mark.parametrize(
    "counts, rates",
    [([10_000, 20_000, 5_000], [0.05, 0.1, 0.3]), ([200_000], [0.01]), ([3000] * 20, [0.1] * 20)],
)
def test_normal_approximation_agrees_with_exact_where_both_apply(counts, rates):
    exact = secagg_threshold(counts, rates, 0.05, 0.01, method="exact")
    normal = secagg_threshold(counts, rates, 0.05, 0.01, method="normal")
    assert abs(exact.threshold - normal.threshold) <= max(2, 0.002 * exact.threshold)
    assert normal.abort_probability == pytest.approx(exact.abort_probability, abs=2e-3)
    assert exact.expected_survivors == pytest.approx(normal.expected_survivors)


def test_auto_uses_normal_for_huge_pools():
    result = secagg_threshold([10**9] * 4, [0.5] * 4, 0.0, 0.01)
    assert not result.exact
    assert result.threshold == pytest.approx(2e9, rel=1e-3)


def test_pool_too_small_reports_m_one_and_the_true_abort_probability():
    # 5 clients at rate 0.1: P(S = 0) = 0.9^5 ~ 0.59 > 0.01
    result = secagg_threshold([5], [0.1], 0.0, 0.01)
    assert result.threshold == 1
    assert not result.meets_target
    assert result.abort_probability == pytest.approx(0.9**5, rel=1e-9)


def test_windowed_distribution_matches_full_pmf():
    counts, rates = [400, 300], [0.3, 0.05]
    offset, pmf, left_out = survivor_distribution(counts, rates, tail_mass=1e-18)
    full = np.diff(full_cdf_below(counts, rates))
    np.testing.assert_allclose(pmf, full[offset : offset + len(pmf)], rtol=1e-9, atol=1e-16)
    # left_out bounds the mass below the window (each member's lower tail, summed)
    assert full[:offset].sum() <= left_out <= 1e-18


def test_batched_single_group_thresholds_equal_the_general_ones():
    from planner.secagg import single_group_thresholds

    counts = np.array([5, 100, 1000, 37, 20000])
    rates = np.array([0.1, 0.02, 0.3, 0.9, 0.001])
    batch = single_group_thresholds(counts, rates, 0.1, 0.01)
    for n, q, result in zip(counts, rates, batch):
        general = secagg_threshold([n], [q], 0.1, 0.01, method="exact")
        assert result.threshold == general.threshold
        assert result.meets_target == general.meets_target
        assert result.abort_probability == pytest.approx(general.abort_probability, rel=1e-6, abs=1e-8)


# ---------------------------------------------------------------- binomial without scipy.stats


def _binomial_arguments(seed: int) -> list[tuple[str, Any, Any, Any]]:
    """Random and edge arguments of every function secagg asks of the binomial: the
    support's ends, outside it, non-integral k, p of 0 and 1, tiny tails, invalid n and p."""
    rng = np.random.default_rng(seed)
    cases: list[tuple[str, Any, Any, Any]] = []
    for _ in range(400):
        n = float(rng.choice([0, 1, 2, int(rng.integers(3, 5000))]))
        p = float(rng.choice([0.0, 1.0, rng.uniform(), 10 ** rng.uniform(-6, -1), 1 - 10 ** rng.uniform(-6, -1)]))
        k = float(rng.choice([-1.0, 0.0, n - 1, n, n + 1, float(rng.integers(-2, int(n) + 3)), rng.uniform(-2, n + 2)]))
        q = float(rng.choice([0.0, 1.0, rng.uniform(), 10 ** rng.uniform(-12, -1), 1 - 10 ** rng.uniform(-12, -1)]))
        for name in ("pmf", "cdf", "sf"):
            cases.append((name, k, n, p))
        for name in ("ppf", "isf"):
            cases.append((name, q, n, p))
    n_vec = rng.integers(0, 300, 50).astype(float)
    p_vec = rng.uniform(0, 1, 50)
    n_vec[:3] = [-1.0, 2.5, np.nan]  # invalid n: nan, as scipy answers
    p_vec[3:5] = [-0.1, 1.5]
    for name in ("pmf", "cdf", "sf"):
        cases.append((name, np.arange(-1, 49, dtype=float), n_vec, p_vec))
        cases.append((name, 0, n_vec, p_vec))
        cases.append((name, np.array([np.nan, -np.inf, np.inf, 3.0]), 10.0, 0.3))
    for name in ("ppf", "isf"):
        cases.append((name, 1e-3, n_vec, p_vec))
        cases.append((name, np.array([0.0, 1.0, 0.5, np.nan, -0.1, 1.1]), 10.0, 0.3))
    return cases


@pytest.mark.parametrize("seed", [0, 1])
def test_binomial_without_scipy_stats_equals_scipy_stats(seed: int) -> None:
    """secagg's thresholds use scipy.stats.binom's own Boost functions without importing
    scipy.stats (issue 26 §2): every answer, its type and its nan must be the same."""
    from scipy import stats as scipy_stats

    from planner import secagg

    for name, x, n, p in _binomial_arguments(seed):
        ours = getattr(secagg._stats().binom, name)(x, n, p)
        theirs = getattr(scipy_stats.binom, name)(x, n, p)
        assert type(ours) is type(theirs), (name, x, n, p)
        np.testing.assert_array_equal(ours, theirs, err_msg=f"binom.{name}({x}, {n}, {p})")
    for x in (-40.0, -3.2, -0.0, 0.0, 1e-300, 0.7, 5.0, np.inf, -np.inf):
        assert secagg._stats().norm.cdf(x) == scipy_stats.norm.cdf(x)
    for q in (0.0, 1e-300, 1e-12, 0.01, 0.5, 0.999, 1.0):
        assert secagg._stats().norm.ppf(q) == scipy_stats.norm.ppf(q)


def test_planning_does_not_import_scipy_stats() -> None:
    """`gdpfed plan` spent about a third of its start-up importing scipy.stats for the
    binomial quantiles of the thresholds (issue 26 §2); a plan in a fresh interpreter must
    not import it."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = (
        "import contextlib, io, sys\n"
        "from app.cli import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert run(['plan', {str(root / 'examples' / 'scenario.json')!r}]) == 0\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"
