"""The tight (pld) accounting of the Poisson-subsampled Skellam event (docs/accounting.md §11.7).

The dominating Gaussian is checked against the exact trade-off curve of shifted Skellam
pmfs (scipy's cdf, another path than the accountant's), and pld's epsilon against
dp-accounting's PLD built from the exact subsampled pmfs of concrete shifts (pessimistic,
both directions, a fine interval): never below it.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from scipy import stats

import accounting
from accounting.accountants.pld import _pld_delta
from accounting.events import PoissonSampledGaussian, PoissonSampledSkellam
from accounting.events import poisson_sampled_skellam as skellam
from accounting.events.poisson_sampled_skellam import gaussian_domination, log_skellam_pmf_large, unit_shift_table
from planner.discrete import choose_scale, rounded_l1_bound, rounded_l2_bound
from tests.accounting import test_skellam_event as exact

FINE = 1e-5  # dp-accounting's interval: its pessimistic excess (about steps * FINE) stays below our margin


@pytest.mark.parametrize("seed", range(4))
def test_every_vertex_of_a_shifts_trade_off_curve_is_above_the_dominating_gaussian(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(6):
        variance = float(rng.uniform(0.5, 500.0))
        shift = int(rng.integers(1, 7))
        m1, _ = unit_shift_table(variance)
        # vertex j: reject "without" when X > j; Phi^-1(P(X <= j)) - Phi^-1(P(X <= j - k)) <= k m1
        js = np.arange(-int(12 * math.sqrt(variance)) - 20, int(12 * math.sqrt(variance)) + 20)
        upper = stats.norm.ppf(stats.skellam.cdf(js, variance / 2, variance / 2))
        lower = stats.norm.ppf(stats.skellam.cdf(js - shift, variance / 2, variance / 2))
        inside = np.isfinite(upper) & np.isfinite(lower) & (np.abs(upper) < 7) & (np.abs(lower) < 7)
        assert inside.sum() > 10
        gaps = upper[inside] - lower[inside]
        assert np.max(gaps) <= shift * m1 * (1 + 1e-7), (variance, shift)
        # and the margin is small: the Gaussian of the same variance is nearly as private
        assert m1 * math.sqrt(variance) - 1 < 0.2 / variance + 1e-6


def _ours(q: float, variance: float, l2: float, l1: float, steps: int, delta: float) -> float:
    event = PoissonSampledSkellam(
        sampling_rate=q, variance=variance, l2_sensitivity=l2, l1_sensitivity=l1, steps=steps
    )
    report = accounting.epsilon_of_events([event], delta=delta, accountant="pld")
    assert not report.fallback and report.accountant_used == "pld"
    return report.epsilon


def _random_case(seed: int) -> tuple[float, float, int, int, float]:
    rng = np.random.default_rng(100 + seed)
    q = float(rng.choice([1.0, 0.5, 0.1, 0.03]))
    variance = float(rng.uniform(4.0, 400.0))
    shift = int(rng.integers(1, 6))
    steps = int(rng.choice([1, 5, 20]))
    delta = float(rng.choice([1e-3, 1e-5]))
    return q, variance, shift, steps, delta


FULL = bool(os.environ.get("GDPFED_FULL"))


@pytest.mark.parametrize("seed", range(24) if FULL else [0, 3, 6])
def test_pld_is_never_below_dp_accountings_pld_of_the_exact_subsampled_pmfs(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exact, "INTERVAL", FINE)
    q, variance, shift, steps, delta = _random_case(seed)
    ours = _ours(q, variance, shift, shift, steps, delta)
    theirs = exact._dp_accounting_epsilon(q, variance, shift, steps, delta, pessimistic=True)
    assert ours >= theirs, (q, variance, shift, steps, delta, ours, theirs)
    # and within a few percent of it: the dominating Gaussian is close to the exact pmf
    assert ours <= 1.15 * theirs + 1e-3


def _product_pmfs(variance: float, shifts: tuple[int, ...], q: float) -> tuple[dict[int, float], dict[int, float]]:
    """log pmfs of Sk^n and of (1-q) Sk^n + q (Sk^n + shifts), outcomes flattened to integers."""
    reach = int(12 * math.sqrt(variance) + 12)
    ks = np.arange(-reach, reach + 1)
    base = exact._skellam_logpmf(ks, variance)
    grids = np.meshgrid(*([ks] * len(shifts)), indexing="ij")
    log_base = np.sum([exact._skellam_logpmf(g, variance) for g in grids], axis=0)
    log_shifted = np.sum([exact._skellam_logpmf(g - s, variance) for g, s in zip(grids, shifts, strict=True)], axis=0)
    mixture = np.logaddexp(math.log1p(-q) + log_base, math.log(q) + log_shifted) if q < 1 else log_shifted
    keep = (log_base > -60) | (mixture > -60)
    keys = np.arange(log_base.size).reshape(log_base.shape)[keep].tolist()
    assert base.size == ks.size
    return dict(zip(keys, log_base[keep].tolist(), strict=True)), dict(zip(keys, mixture[keep].tolist(), strict=True))


@pytest.mark.parametrize(
    "shifts,q,steps",
    [
        ((1, 1), 0.3, 3),
        ((2, 1), 1.0, 2),
        # three coordinates: 600k outcomes for dp-accounting, a minute and a half
        pytest.param((1, 1, 1), 0.5, 2, marks=pytest.mark.slow),
    ],
)
def test_vector_shifts_subsampled_and_composed_stay_below_pld(shifts: tuple[int, ...], q: float, steps: int) -> None:
    from dp_accounting.pld import privacy_loss_distribution as pld

    if len(shifts) == 3 and not FULL:
        pytest.skip("GDPFED_FULL=1 runs the three-coordinate case")
    variance, delta = 12.0 if len(shifts) == 3 else 30.0, 1e-5
    lower, upper = _product_pmfs(variance, shifts, q)
    theirs = max(
        pld.from_two_probability_mass_functions(a, b, value_discretization_interval=FINE)
        .self_compose(steps)
        .get_epsilon_for_delta(delta)
        for a, b in ((upper, lower), (lower, upper))
    )
    l2 = math.sqrt(sum(s * s for s in shifts))
    assert _ours(q, variance, l2, float(sum(shifts)), steps, delta) >= theirs


def test_at_the_default_grid_the_overhead_over_the_gaussian_at_equal_noise_is_below_one_percent() -> None:
    d, clip, delta = 54_410, 1.0, 1e-5
    scale = choose_scale(clip, d)
    l2 = rounded_l2_bound(clip, scale, d)
    l1 = rounded_l1_bound(l2, d)
    for q, sigma, steps in ((0.01, 1.0, 1000), (0.22, 1.0, 100)):
        variance = (sigma * clip * scale) ** 2
        skellam = _ours(q, variance, l2, l1, steps, delta)
        same_sensitivity = accounting.epsilon_of_events(
            [PoissonSampledGaussian(sampling_rate=q, noise_multiplier=math.sqrt(variance) / l2, steps=steps)],
            delta=delta, accountant="pld",
        ).epsilon
        continuous = accounting.epsilon_of_events(
            [PoissonSampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=steps)], delta=delta, accountant="pld"
        ).epsilon
        # the discretisation itself (same D2): below 1e-6; with rounding's norm inflation: below 1%
        assert 0 <= skellam / same_sensitivity - 1 < 1e-6
        assert 0 <= skellam / continuous - 1 < 0.01


def test_the_tail_mass_is_charged_to_delta_and_a_shift_past_the_table_falls_back() -> None:
    event = PoissonSampledSkellam(sampling_rate=0.1, variance=2.0, l2_sensitivity=20.0, l1_sensitivity=20.0, steps=7)
    sigma, eta = gaussian_domination(2.0, 20.0, 20.0)
    assert 0 < eta < 1e-100 and event.dominating_gaussian() == (sigma, 7 * eta)
    assert _pld_delta([event], 1e-5) == 1e-5 - 7 * eta
    far = PoissonSampledSkellam(sampling_rate=0.1, variance=2.0, l2_sensitivity=500.0, l1_sensitivity=500.0, steps=1)
    assert far.dominating_gaussian() is None
    report = accounting.epsilon_of_events([far], delta=1e-5, accountant="pld")
    assert report.fallback and report.accountant_used == "rdp" and "tabulated" in (report.reason or "")
    huge = PoissonSampledSkellam(sampling_rate=0.1, variance=2e10, l2_sensitivity=9e3, l1_sensitivity=9e5, steps=1)
    assert huge.dominating_gaussian() is None
    assert accounting.epsilon_of_events([huge], delta=1e-5, accountant="pld").fallback


def test_calibration_with_spent_skellam_rounds_meets_the_target_at_the_reduced_delta() -> None:
    spent = [PoissonSampledSkellam(sampling_rate=0.05, variance=4e4, l2_sensitivity=101.0, l1_sensitivity=900.0, steps=40)]
    result = accounting.noise_multiplier(0.05, 40, 3.0, 1e-5, accountant="pld", spent=spent)
    assert not result.fallback and result.accountant_used == "pld"
    phase = PoissonSampledGaussian(sampling_rate=0.05, noise_multiplier=result.noise_multiplier, steps=40)
    assert result.epsilon <= 3.0
    assert accounting.epsilon_of_events([*spent, phase], delta=1e-5, accountant="pld").epsilon == result.epsilon


@pytest.mark.parametrize("variance", [1e4, 1e6, 1e8, 9e8])
def test_debyes_expansion_matches_scipys_bessel_function_where_both_compute(variance: float) -> None:
    from scipy.special import ive

    js = np.arange(0, int(28 * math.sqrt(variance)), max(1, int(math.sqrt(variance) / 40)))
    reference = np.log(ive(js.astype(float), variance))
    finite = np.isfinite(reference)
    assert finite.sum() > 100
    ours = log_skellam_pmf_large(js, variance)[finite]
    assert np.max(np.abs(ours - reference[finite]) / np.maximum(1.0, np.abs(reference[finite]))) < 5e-12


def test_above_scipys_range_the_table_comes_from_debyes_expansion(monkeypatch: pytest.MonkeyPatch) -> None:
    # ive gives nan from 2^30 on: at 2.5e9 (the d = 54,410 grid at sigma 12) the event is tabulated
    m1, _ = unit_shift_table(2.5e9)
    assert 0 <= m1 * math.sqrt(2.5e9) - 1 < 2e-8
    # and at 1e8 both ways give m1 within the margin
    debye = unit_shift_table(1e8)[0]
    monkeypatch.setattr(skellam, "DEBYE_VARIANCE", 1e12)
    unit_shift_table.cache_clear()
    try:
        assert abs(unit_shift_table(1e8)[0] / debye - 1) < skellam.DOMINATION_MARGIN / 10
    finally:
        unit_shift_table.cache_clear()


@pytest.mark.parametrize("variance", [1e-200, 1e-320])
def test_a_skellam_variance_too_small_to_tabulate_falls_back_instead_of_failing(variance: float) -> None:
    # P(X > 0) below the table's floor leaves no vertex: pld answers by rdp, marked (a
    # request with such a spent event got an IndexError, a 500 from the service)
    event = PoissonSampledSkellam(sampling_rate=0.1, variance=variance, l2_sensitivity=1.0, l1_sensitivity=1.0, steps=3)
    assert event.dominating_gaussian() is None
    result = accounting.epsilon_of_events([event], delta=1e-5, accountant="pld")
    assert result.fallback and result.accountant_used == "rdp"
    assert result.epsilon > 0


@pytest.mark.parametrize("variance", [1e-17, 1e-10, 0.5, 1e6, 1e8, 1e9, 5e9])
def test_the_largest_step_is_the_exact_central_step_to_its_rounding(variance: float) -> None:
    """m1 is the central step 2 Z(0) = 2 sqrt(2) erfinv(P(X = 0)) (50 digits here) raised by the
    margin: 2 Z(0) from a tail summed from the far end carried that sum's rounding (m1 8.6e-10
    above it at mu = 1e9), which the planner's closed form for mu cannot predict; and near no
    noise, where P(X = 0) is near 1, erfinv of it in doubles would lose the digits instead (inf
    at mu = 1e-17), so there the tail is summed."""
    import mpmath  # type: ignore[import-untyped]

    with mpmath.workdps(50):
        p0 = mpmath.besseli(0, variance) * mpmath.exp(-variance)
        exact = float(2 * mpmath.sqrt(2) * mpmath.erfinv(p0)) * (1 + skellam.DOMINATION_MARGIN)
    unit_shift_table.cache_clear()
    m1, _ = unit_shift_table(variance)
    assert -1e-13 <= m1 / exact - 1 <= 1e-10
    assert skellam.central_step(variance) * (1 + skellam.DOMINATION_MARGIN) == pytest.approx(exact, rel=1e-13)


@pytest.mark.parametrize("variance", [0.5, 30.0, 1e4, 1e7])
def test_the_table_is_computed_in_one_pass(variance: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pmf is tabulated once, to the reach Chernoff's bound gives: the table used to start at
    8 sigma and double until the pmf fell below the floor, computing 56 sigma of pmf for 32."""
    calls: list[int] = []
    original = skellam.log_skellam_pmf

    def counted(js: np.ndarray, mu: float) -> np.ndarray:
        if np.size(js) > 1 and js[0] == 0:  # a table from 0 (central_step asks for P(X = 0), or the tail from 1)
            calls.append(np.size(js))
        return original(js, mu)

    monkeypatch.setattr(skellam, "log_skellam_pmf", counted)
    unit_shift_table.cache_clear()
    try:
        _, log_sf = unit_shift_table(variance)
    finally:
        unit_shift_table.cache_clear()
    tables = calls
    assert len(tables) == 1
    reach = tables[0] - 1
    assert reach == skellam.table_reach(variance) and log_sf.size < reach
    assert float(original(np.array([reach]), variance)[0]) < skellam.TAIL_LOG_FLOOR
