"""rdp against published reference values and Google's dp-accounting (docs/accounting.md §2-§4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import accounting
from accounting import rdp
from tests.accounting.conftest import dp_rdp_epsilon, random_cases


@pytest.mark.parametrize(
    ("q", "sigma", "expected"),
    [(0.05, 1.5, 3.61), (0.03, 4.0, 0.576), (0.03, 1.0, 4.12)],
)
def test_reference_values_t500_delta_1e4(q: float, sigma: float, expected: float) -> None:
    report = accounting.epsilon(q, sigma, 500, 1e-4)
    assert report.epsilon == pytest.approx(expected, rel=2e-3)
    assert report.accountant_used == "rdp" and report.optimal_order is not None


def test_matches_dp_accounting_rdp_on_200_seeded_cases() -> None:
    from dp_accounting.rdp import rdp_privacy_accountant as reference

    grid = rdp.order_grid()
    compared = dropped = 0
    for index, (q, sigma, rounds, delta) in enumerate(random_cases(200)):
        ours = accounting.epsilon(q, sigma, rounds, delta).epsilon
        # dp-accounting's RdpAccountant multiplies this one-step curve by T and converts
        # with compute_epsilon; calling those two directly halves the test's time. The
        # first cases also go through the accountant object, to show it is the same.
        curve = reference._compute_rdp_poisson_subsampled_gaussian(q, sigma, grid.orders)
        theirs = float(reference.compute_epsilon(grid.orders, rounds * curve, delta)[0])
        if index < 10:
            assert theirs == pytest.approx(dp_rdp_epsilon(q, sigma, rounds, delta), rel=1e-12)
        assert ours <= theirs * (1 + 5e-3) + 1e-12, (q, sigma, rounds, delta, ours, theirs)
        if np.all(np.isfinite(curve)):
            assert ours == pytest.approx(theirs, rel=5e-3, abs=1e-12), (q, sigma, rounds, delta)
            compared += 1
        else:
            # dp-accounting drops fractional orders whose series has not converged after
            # 1000 terms; we bound their tail instead (docs §2.2), so we may be lower.
            dropped += 1
    assert compared >= 150 and compared + dropped == 200


@pytest.mark.parametrize(("q", "sigma"), [(0.0607, 0.58), (0.3, 0.4), (0.9, 0.35)])
def test_tail_bound_is_above_a_two_million_term_sum(q: float, sigma: float) -> None:
    # Where dp-accounting gives up (inf), our series + tail bound must still be an upper
    # bound: compare with the same series summed to 2e6 terms.
    from scipy import special

    for alpha in (1.1, 1.3, 1.5, 2.5):
        ours = rdp.log_a_fractional(q, sigma, alpha)[0]
        i = np.arange(2_000_000, dtype=float)
        j = alpha - i
        log_binom = special.gammaln(alpha + 1) - special.gammaln(i + 1) - special.gammaln(j + 1)
        z0 = sigma**2 * math.log(1 / q - 1) + 0.5
        s0 = log_binom + i * math.log(q) + j * math.log1p(-q) + (i * i - i) / (2 * sigma**2)
        s1 = log_binom + j * math.log(q) + i * math.log1p(-q) + (j * j - j) / (2 * sigma**2)
        s0 += special.log_ndtr((z0 - i) / sigma)
        s1 += special.log_ndtr((j - z0) / sigma)
        long_sum = special.logsumexp(np.concatenate([s0, s1]))
        assert ours >= long_sum - 1e-12
        assert ours <= long_sum + 0.05  # and not uselessly loose


def test_cases_include_the_regime_where_the_closed_form_breaks() -> None:
    # The cross-check above must cover cases where the paper's formula under-noises.
    broken = 0
    for q, sigma, rounds, delta in random_cases(200):
        eps = accounting.epsilon(q, sigma, rounds, delta).epsilon
        if eps > 0 and accounting.closed_form_noise_multiplier(q, rounds, eps, delta) < sigma * 0.999:
            broken += 1
    assert broken >= 10


def test_full_probability_is_the_plain_gaussian() -> None:
    grid = rdp.order_grid()
    curve = rdp.rdp_curve(1.0, 2.0, grid)
    np.testing.assert_allclose(curve, grid.orders / 8.0)


def test_fractional_series_is_an_upper_bound_close_to_dp_accounting() -> None:
    from dp_accounting.rdp import rdp_privacy_accountant as reference

    grid = rdp.order_grid()
    for q, sigma in [(0.01, 0.8), (0.2, 0.5), (0.6, 2.0), (0.001, 5.0), (0.05, 1.5)]:
        ours = rdp.rdp_curve(q, sigma, grid)
        theirs = reference._compute_rdp_poisson_subsampled_gaussian(q, sigma, grid.orders)
        finite = np.isfinite(theirs)
        # ours sums |terms| and bounds the tail: never below, and within 0.1%.
        assert np.all(ours[finite] >= theirs[finite] * (1 - 1e-6) - 1e-15)
        np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-3)
        assert np.all(np.isfinite(ours))


def test_windowed_epsilon_is_never_below_full_grid_and_usually_equal() -> None:
    grid = rdp.order_grid()
    equal = 0
    cases = random_cases(80, seed=7)
    for q, sigma, rounds, delta in cases:
        full = rdp.epsilon_from_rdp(grid.orders, rounds * rdp.rdp_curve(q, sigma, grid), delta)[0]
        fast = rdp.windowed_epsilons(grid, np.array([q]), np.array([sigma]), rounds, delta)[0]
        assert fast >= full * (1 - 1e-12)
        equal += math.isclose(fast, full, rel_tol=1e-9)
    assert equal >= 0.95 * len(cases)


def test_composition_of_phases_is_the_sum_of_curves() -> None:
    grid = rdp.order_grid()
    phases = [(0.02, 1.1, 300), (0.05, 2.0, 100), (1.0, 8.0, 3)]
    expected = sum(steps * rdp.rdp_curve(q, s, grid) for q, s, steps in phases)
    np.testing.assert_allclose(rdp.rdp_of_phases(phases, grid), expected)
    report = accounting.epsilon_of_phases(
        [accounting.Phase(sampling_rate=q, noise_multiplier=s, steps=t) for q, s, t in phases], 1e-5
    )
    assert report.epsilon == pytest.approx(rdp.epsilon_from_rdp(grid.orders, expected, 1e-5)[0])


def test_dp_accounting_agrees_on_a_heterogeneous_history() -> None:
    import dp_accounting

    phases = [(0.02, 1.1, 300), (0.05, 2.0, 100)]
    accountant = dp_accounting.rdp.RdpAccountant()
    for q, s, t in phases:
        accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), t)
    ours = accounting.epsilon_of_phases(
        [accounting.Phase(sampling_rate=q, noise_multiplier=s, steps=t) for q, s, t in phases], 1e-5
    )
    assert ours.epsilon == pytest.approx(accountant.get_epsilon(1e-5), rel=5e-3)


def test_order_grid_rejects_bad_orders() -> None:
    with pytest.raises(ValueError):
        rdp.order_grid([0.5, 2.0])
