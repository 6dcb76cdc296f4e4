"""rdp at tiny sampling rates, where log A_alpha = log(1 + something below 1e-16) (docs/accounting.md §2.4).

Before the fix log A rounded to 0, the RDP to 0 and epsilon to 0 (optimistic); these
check every rdp path against Google's dp-accounting, which keeps those digits.
"""

from __future__ import annotations

import numpy as np
import pytest

import accounting
from accounting import rdp
from tests.accounting.conftest import dp_pld_epsilon, dp_rdp_epsilon, pld_slack


def _dp_rdp_epsilon_on_grid(q: float, sigma: float, rounds: int, delta: float) -> float:
    from dp_accounting.rdp import rdp_privacy_accountant as reference

    orders = rdp.order_grid().orders
    curve = reference._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders)
    return float(reference.compute_epsilon(orders, rounds * curve, delta)[0])


@pytest.mark.parametrize(
    ("q", "sigma", "rounds", "expected"),
    [(1e-8, 1.5, 100_000_000, 0.1029), (1e-9, 0.409, 1_000_000_000, 1.51)],
)
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_reviewer_cases_match_dp_accounting(q: float, sigma: float, rounds: int, expected: float, accountant: str) -> None:
    theirs = dp_rdp_epsilon(q, sigma, rounds, 1e-5)
    assert theirs == pytest.approx(expected, rel=2e-3)
    ours = accounting.epsilon(q, sigma, rounds, 1e-5, accountant).epsilon  # type: ignore[arg-type]
    assert theirs * (1 - 1e-9) <= ours <= theirs * 1.01


def _sweep(count: int, seed: int = 20261126) -> list[tuple[float, float, int, float]]:
    rng = np.random.default_rng(seed)
    return [
        (
            float(10 ** rng.uniform(-10, -4)),
            float(10 ** rng.uniform(np.log10(0.4), 1)),
            int(round(10 ** rng.uniform(0, 9))),
            float(10 ** rng.uniform(-10, -3)),
        )
        for _ in range(count)
    ]


# dp-accounting's own sums carry rounding of up to ~1e-9 relative here (it adds log-space
# terms whose sum is 1 + tiny, cancelling -alpha q against +alpha q); the 50-digit test
# below shows ours is exact to 1e-12 where the two differ, so the bound allows 1e-8.
_DP_ROUNDING = 1e-8


def test_integer_orders_match_a_50_digit_sum() -> None:
    import mpmath  # type: ignore[import-untyped]

    mpmath.mp.dps = 50
    grid = rdp.order_grid()
    for q, sigma in [(1e-8, 1.5), (1e-9, 0.409), (1e-10, 10.0), (6.467852088365859e-05, 9.28484593777198)]:
        curve = rdp.rdp_curve(q, sigma, grid)
        for alpha in (2, 5, 20, 63, 256):
            terms = (
                mpmath.binomial(alpha, k) * mpmath.mpf(q) ** k * (1 - mpmath.mpf(q)) ** (alpha - k)
                * mpmath.exp(mpmath.mpf(k * k - k) / (2 * mpmath.mpf(sigma) ** 2))
                for k in range(alpha + 1)
            )
            exact = float(mpmath.log(mpmath.fsum(terms)) / (alpha - 1))
            ours = curve[list(grid.orders).index(alpha)]
            assert ours == pytest.approx(exact, rel=1e-12, abs=0.0), (q, sigma, alpha)


def test_sweep_of_tiny_sampling_rates_is_never_below_dp_accounting() -> None:
    for q, sigma, rounds, delta in _sweep(60):
        theirs = _dp_rdp_epsilon_on_grid(q, sigma, rounds, delta)
        ours = accounting.epsilon(q, sigma, rounds, delta).epsilon
        assert ours >= theirs * (1 - _DP_ROUNDING), (q, sigma, rounds, delta, ours, theirs)
        assert ours <= theirs * 1.03 + 1e-12, (q, sigma, rounds, delta, ours, theirs)


def test_sweep_pld_answer_is_never_below_dp_accounting() -> None:
    fallbacks = 0
    for q, sigma, rounds, delta in _sweep(12, seed=7):
        report = accounting.epsilon(q, sigma, rounds, delta, "pld")
        if report.fallback:  # answered by rdp: dp-accounting's RDP is the reference
            fallbacks += 1
            theirs = _dp_rdp_epsilon_on_grid(q, sigma, rounds, delta)
            assert report.epsilon >= theirs * (1 - _DP_ROUNDING), (q, sigma, rounds, delta, report.epsilon, theirs)
        elif rounds <= 10_000:  # a PLD answer: dp-accounting's pessimistic PLD less its discretisation slack
            theirs = dp_pld_epsilon(q, sigma, rounds, delta)
            assert report.epsilon >= theirs - pld_slack(rounds, theirs), (q, sigma, rounds, delta, report.epsilon, theirs)
    assert fallbacks >= 3


def test_every_rdp_path_agrees_at_tiny_sampling_rates() -> None:
    grid = rdp.order_grid()
    cases = _sweep(20, seed=3)
    q = np.array([c[0] for c in cases])
    sigma = np.array([c[1] for c in cases])
    rounds = np.array([float(c[2]) for c in cases])
    delta = 1e-6
    curves = rdp.rdp_curves(q, sigma, grid)
    windowed = rdp.windowed_epsilons(grid, q, sigma, rounds, delta)
    for k in range(q.size):
        curve = rdp.rdp_curve(float(q[k]), float(sigma[k]), grid)
        assert np.array_equal(curves[k], curve)
        assert np.all(curve > 0)  # the RDP of a sampled Gaussian with q > 0 is positive at every order
        full, _ = rdp.epsilon_from_rdp(grid.orders, rounds[k] * curve, delta)
        assert full >= _dp_rdp_epsilon_on_grid(float(q[k]), float(sigma[k]), int(rounds[k]), delta) * (1 - _DP_ROUNDING)
        assert windowed[k] >= full
        single, model = rdp.single_point_epsilons(grid, float(q[k]), float(rounds[k]), delta)
        assert single(float(sigma[k])) == windowed[k]
        assert model(float(sigma[k])) >= full
