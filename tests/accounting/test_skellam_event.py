"""The Poisson-subsampled distributed Skellam event (docs/accounting.md §11.6).

Checked against what does not share its derivation: the exact Renyi divergence of
shifted Skellam pmfs (scipy), and dp-accounting's PLD built from the exact pmfs of the
subsampled mechanism for concrete neighbouring shifts. The accounted epsilon bounds the
worst case over every rounded vector within the sensitivities, so it must never be below
the figure for any one concrete shift.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import accounting
from accounting import InvalidInputError
from accounting.events import EVENT_KINDS, PoissonSampledSkellam, validate_events
from accounting.events.poisson_sampled_skellam import skellam_rdp, subsampled_rdp
from accounting.rdp import order_grid


def _support(variance: float, shift: int) -> np.ndarray:
    reach = int(abs(shift) + 40 * math.sqrt(variance) + 40)
    return np.arange(-reach, reach + 1)


def _skellam_logpmf(ks: np.ndarray, variance: float) -> np.ndarray:
    values = np.asarray(stats.skellam.logpmf(ks, variance / 2.0, variance / 2.0), dtype=float)
    return np.where(np.isnan(values), -np.inf, values)


def _exact_renyi(order: int, variance: float, shifts: list[int]) -> float:
    """D_order(Sk + shift || Sk) of a multi-coordinate integer shift: a sum over coordinates."""
    total = 0.0
    for shift in shifts:
        ks = _support(variance, shift)
        log_p = _skellam_logpmf(ks - shift, variance)
        log_q = _skellam_logpmf(ks, variance)
        finite = np.isfinite(log_p) & np.isfinite(log_q)  # scipy's pmf underflows to 0 far out
        total += float(logsumexp(order * log_p[finite] - (order - 1) * log_q[finite])) / (order - 1)
    return total


@pytest.mark.parametrize("seed", range(6))
def test_the_skellam_rdp_bound_is_above_the_exact_divergence_of_concrete_shifts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(8):
        variance = float(rng.uniform(2.0, 300.0))
        shifts = [int(v) for v in rng.integers(-4, 5, size=int(rng.integers(1, 4)))]
        if not any(shifts):
            continue
        l2 = math.sqrt(sum(s * s for s in shifts))
        l1 = float(sum(abs(s) for s in shifts))
        for order in (2, 3, 5, 8, 16):
            exact = _exact_renyi(order, variance, shifts)
            assert skellam_rdp(order, variance, l2, l1) >= exact * (1 - 1e-9), (variance, shifts, order)


INTERVAL = 1e-3


def _dp_accounting_epsilon(q: float, variance: float, shift: int, steps: int, delta: float, pessimistic: bool) -> float:
    """dp-accounting's PLD of the Poisson-subsampled Skellam for one concrete shift, both directions."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    ks = _support(variance, shift)
    base = _skellam_logpmf(ks, variance)
    shifted = _skellam_logpmf(ks - shift, variance)
    mixture = np.logaddexp(math.log1p(-q) + base, math.log(q) + shifted) if q < 1 else shifted
    keep = base > -60  # outcomes below e^-60 in both: far beyond any delta here
    keep |= mixture > -60
    lower = dict(zip(ks[keep].tolist(), base[keep].tolist(), strict=True))
    upper = dict(zip(ks[keep].tolist(), mixture[keep].tolist(), strict=True))
    interval = INTERVAL
    remove = pld.from_two_probability_mass_functions(
        upper, lower, pessimistic_estimate=pessimistic, value_discretization_interval=interval
    )
    add = pld.from_two_probability_mass_functions(
        lower, upper, pessimistic_estimate=pessimistic, value_discretization_interval=interval
    )
    return max(
        remove.self_compose(steps).get_epsilon_for_delta(delta),
        add.self_compose(steps).get_epsilon_for_delta(delta),
    )


@pytest.mark.parametrize("seed", range(10))
def test_accounted_epsilon_is_never_below_dp_accountings_pld_of_the_exact_pmf(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    q = float(rng.choice([1.0, 0.5, 0.1, 0.03]))
    variance = float(rng.uniform(4.0, 400.0))
    shift = int(rng.integers(1, 6))
    steps = int(rng.choice([1, 5, 20]))
    delta = float(rng.choice([1e-3, 1e-5]))
    event = PoissonSampledSkellam(
        sampling_rate=q, variance=variance, l2_sensitivity=shift, l1_sensitivity=shift, steps=steps
    )
    ours = accounting.epsilon_of_events([event], delta=delta).epsilon
    theirs = _dp_accounting_epsilon(q, variance, shift, steps, delta, pessimistic=True)
    assert ours >= theirs, (q, variance, shift, steps, delta, ours, theirs)


def test_two_coordinate_shifts_compose_below_the_accounted_figure() -> None:
    from dp_accounting.pld import privacy_loss_distribution as pld

    variance, shifts, delta = 60.0, (3, 2), 1e-5
    composed: Any = None
    for shift in shifts:
        ks = _support(variance, shift)
        lower = dict(zip(ks.tolist(), _skellam_logpmf(ks, variance).tolist(), strict=True))
        upper = dict(zip(ks.tolist(), _skellam_logpmf(ks - shift, variance).tolist(), strict=True))
        one = pld.from_two_probability_mass_functions(upper, lower, value_discretization_interval=1e-3)
        composed = one if composed is None else composed.compose(one)
    assert composed is not None
    l2 = math.hypot(*shifts)
    event = PoissonSampledSkellam(
        sampling_rate=1.0, variance=variance, l2_sensitivity=l2, l1_sensitivity=sum(shifts), steps=1
    )
    assert accounting.epsilon_of_events([event], delta=delta).epsilon >= composed.get_epsilon_for_delta(delta)


def test_without_sampling_the_curve_is_the_skellam_bound_and_tends_to_the_gaussian() -> None:
    grid = order_grid([2.0, 3.0, 2.5, 10.0])
    event = PoissonSampledSkellam(sampling_rate=1.0, variance=1e8, l2_sensitivity=1e4, l1_sensitivity=2e4, steps=3)
    curve = event.rdp(grid)
    assert curve[0] == pytest.approx(3 * skellam_rdp(2, 1e8, 1e4, 2e4))
    assert curve[2] == curve[1]  # order 2.5 takes order 3's value: an upper bound
    gaussian = accounting.PoissonSampledGaussian(sampling_rate=1.0, noise_multiplier=1.0, steps=3).rdp(grid)
    assert np.all(curve >= gaussian) and curve[3] == pytest.approx(gaussian[3], rel=1e-3)


def test_subsampling_never_raises_the_curve_and_lowers_it_for_small_rates() -> None:
    base = np.array([0.0, 0.0] + [skellam_rdp(a, 50.0, 3.0, 5.0) for a in range(2, 40)])
    for a in (2, 5, 39):
        assert subsampled_rdp(a, 1.0, base) == base[a]
        assert subsampled_rdp(a, 0.01, base) < base[a]


def test_the_event_is_registered_round_trips_and_refuses_bad_fields() -> None:
    assert EVENT_KINDS["poisson_sampled_skellam"] is PoissonSampledSkellam
    fields = {"sampling_rate": 0.1, "variance": 100.0, "l2_sensitivity": 3.0, "l1_sensitivity": 4.0, "steps": 2}
    (event,) = validate_events([{"kind": "poisson_sampled_skellam", **fields}], "spent")
    assert event == PoissonSampledSkellam(**fields)
    with pytest.raises(InvalidInputError) as error:
        validate_events([{"kind": "poisson_sampled_skellam", **fields, "variance": -1.0}], "spent")
    assert error.value.field == "spent[0].variance"
    with pytest.raises(InvalidInputError) as error:
        validate_events([{"kind": "poisson_sampled_skellam", **fields, "l1_sensitivity": 2.0}], "spent")
    assert error.value.field.startswith("spent[0]") and "l1_sensitivity" in error.value.message


def test_it_composes_with_gaussian_phases_and_pld_accounts_for_it_below_rdp() -> None:
    skellam = PoissonSampledSkellam(
        sampling_rate=0.05, variance=4e6, l2_sensitivity=2010.0, l1_sensitivity=5e5, steps=50
    )
    gaussian = accounting.PoissonSampledGaussian(sampling_rate=0.05, noise_multiplier=1.0, steps=50)
    alone = accounting.epsilon_of_events([skellam], delta=1e-5).epsilon
    both = accounting.epsilon_of_events([skellam, gaussian], delta=1e-5).epsilon
    assert both > alone
    # pld composes the dominating Gaussian phase (docs/accounting.md §11.7): tighter than rdp
    report = accounting.epsilon_of_events([skellam], delta=1e-5, accountant="pld")
    assert not report.fallback and report.accountant_used == "pld" and report.epsilon < alone
    with_gaussian = accounting.epsilon_of_events([skellam, gaussian], delta=1e-5, accountant="pld").epsilon
    assert report.epsilon < with_gaussian < both


@pytest.mark.parametrize("q", [1e-9, 1e-7, 1e-5])
def test_subsampled_bound_keeps_its_digits_at_tiny_sampling_rates(q: float) -> None:
    # The bracket is 1 + something below double precision at q = 1e-9: its plain log was
    # 0 (an optimistic RDP). Compare with the same formula summed to 50 digits.
    import mpmath  # type: ignore[import-untyped]

    mpmath.mp.dps = 50
    base = np.array([0.0, 0.0] + [skellam_rdp(a, 50.0, 3.0, 5.0) for a in range(2, 40)])
    for a in (2, 5, 39):
        mq = mpmath.mpf(q)
        bracket = (1 - mq) ** (a - 1) * (a * mq - mq + 1) + mpmath.binomial(a, 2) * mq**2 * (1 - mq) ** (a - 2) * mpmath.exp(base[2])
        bracket += 3 * mpmath.fsum(
            mpmath.binomial(a, n) * mq**n * (1 - mq) ** (a - n) * mpmath.exp((n - 1) * mpmath.mpf(base[n])) for n in range(3, a + 1)
        )
        exact = min(float(base[a]), float(mpmath.log(bracket) / (a - 1)))
        assert subsampled_rdp(a, q, base) == pytest.approx(exact, rel=1e-9, abs=0.0), (a, q)


def test_logsumexp_is_scipys_value_for_value() -> None:
    """The Skellam bound's own logsumexp (scipy's wrapper cost a quarter of a 3-group plan)
    returns scipy.special.logsumexp's value bit for bit: wide and narrow spreads, ties at the
    max, -inf, +inf and nan entries."""
    from accounting.events.poisson_sampled_skellam import _logsumexp

    rng = np.random.default_rng(26)
    cases = [np.array(v, dtype=float) for v in ([-np.inf], [-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 1.0],
                                                [1e308, 1e308], [-1e308, 0.0], [-np.inf, np.inf], [3.0])]
    for _ in range(3000):
        values = rng.normal(size=int(rng.integers(1, 200))) * 10 ** rng.uniform(-3, 3) + rng.uniform(-800, 800)
        if rng.random() < 0.1:
            values[rng.integers(0, values.size)] = -np.inf
        if rng.random() < 0.05:
            values[:] = values[0]
        cases.append(values)
    for values in cases:
        expected, got = float(logsumexp(values)), _logsumexp(values)
        assert got == expected or (np.isnan(got) and np.isnan(expected)), values


def _per_order_rdp(event: PoissonSampledSkellam, orders: np.ndarray) -> np.ndarray:
    """The event's curve as it was computed before issue 26's vectorisation, kept verbatim as the
    reference: e(a) one order at a time in Python floats, then Zhu and Wang's bound one integer
    order at a time (its own gammaln, terms and logsumexp per order)."""
    from scipy.special import gammaln

    from accounting.events.poisson_sampled_skellam import _logsumexp
    from accounting.rdp import SMALL_LOG_A

    def e(order: int) -> float:
        a, mu, d2sq, d1 = float(order), event.variance, event.l2_sensitivity**2, event.l1_sensitivity
        square = 4.0 * mu * mu
        second = ((2.0 * a - 1.0) * d2sq + 6.0 * d1) / square if square > 0 else math.inf
        return a * d2sq / (2.0 * mu) + min(second, 3.0 * d1 / (2.0 * mu))

    def subsampled(a: int, q: float, base: np.ndarray) -> float:
        if q >= 1.0:
            return float(base[a])
        log_q, log_1q = math.log(q), math.log1p(-q)
        ls = np.arange(2, a + 1, dtype=float)
        log_binom = gammaln(a + 1.0) - gammaln(ls + 1.0) - gammaln(a - ls + 1.0)
        terms = log_binom + ls * log_q + (a - ls) * log_1q + (ls - 1.0) * base[2 : a + 1]
        terms[1:] += math.log(3.0)
        first = (a - 1) * log_1q + math.log(a * q - q + 1.0)
        log_total = _logsumexp(np.concatenate(([first], terms)))
        if log_total < SMALL_LOG_A:
            exponent = (ls - 1.0) * base[2 : a + 1]
            exponent[1:] += math.log(3.0)
            weights = log_binom + ls * log_q + (a - ls) * log_1q
            with np.errstate(divide="ignore"):
                log_excess = exponent + np.log(-np.expm1(-exponent))
            log_total = math.log1p(math.exp(_logsumexp(weights + log_excess)))
        return min(float(base[a]), log_total / (a - 1))

    ceilings = np.maximum(np.ceil(orders).astype(int), 2)
    base = np.zeros(int(ceilings.max()) + 1)
    for a in range(2, base.size):
        base[a] = e(a)
    values = {a: subsampled(a, event.sampling_rate, base) for a in np.unique(ceilings).tolist()}
    return event.steps * np.array([values[a] for a in ceilings.tolist()])


def test_the_curve_is_the_per_order_loops_bit_for_bit() -> None:
    """Issue 26: the curve is computed for all orders at once (the terms of every order in one
    array, each order's logsumexp by its own segment); every value is the one the per-order loop
    gave, to the last bit, on the default grid and a small one: random events from tiny to
    certain sampling, tiny to huge noise and sensitivities (tiny q takes the bracket - 1 path of
    docs/accounting.md §2.4), and curves whose sums overflow (the scalar logsumexp's own path)."""
    from accounting.events import poisson_sampled_skellam as skellam

    rng = np.random.default_rng(2026)
    cases = [(0.3, 1.0, 1e154, 1e154), (0.5, 1e-200, 1.0, 1e300), (1e-3, 1e-300, 1.0, 1.0), (1e-12, 1e12, 1.0, 1.0),
             (1.0, 50.0, 3.0, 5.0), (0.999999, 1.0, 1e150, 1e160), (1e-300, 5.0, 1.0, 1.0)]
    for _ in range(150):
        q = float(10 ** rng.uniform(-9, 0)) if rng.random() < 0.9 else float(rng.choice([1.0, 0.5, 1 - 1e-9]))
        l2 = float(10 ** rng.uniform(-1, 6))
        cases.append((q, float(10 ** rng.uniform(-1, 12)), l2, l2 * float(10 ** rng.uniform(0, 3))))
    scalar = skellam._logsumexp
    calls = 0

    def counted(values: np.ndarray) -> float:
        nonlocal calls
        calls += 1
        return scalar(values)

    small = 0
    for orders in (order_grid().orders, np.array([1.5, 2.0, 7.0, 7.5, 40.0])):
        grid = order_grid(orders)
        for q, variance, l2, l1 in cases:
            event = PoissonSampledSkellam(
                sampling_rate=q, variance=variance, l2_sensitivity=l2, l1_sensitivity=l1, steps=7
            )
            expected = _per_order_rdp(event, grid.orders)
            skellam._logsumexp = counted
            try:
                got = event.rdp(grid)
            finally:
                skellam._logsumexp = scalar
            assert np.array_equal(got, expected, equal_nan=True), (q, variance, l2, l1)
            small += int(np.any(expected / 7 * (np.maximum(np.ceil(grid.orders), 2) - 1) < 1e-4))
    assert calls > 0 and small > 0  # both the overflowing sums and the bracket - 1 path were compared


def test_the_cached_terms_of_the_curve_are_read_only() -> None:
    """The q-independent terms of Zhu and Wang's bound are built once per order grid and shared by
    every curve (and every thread of the service): none of their arrays can be written, so no caller
    can change what the next curve is computed from (docs/accounting.md §11.6)."""
    from accounting.events import poisson_sampled_skellam as skellam

    terms = skellam._zhu_wang_terms((2, 3, 7))
    for name, array in terms._asdict().items():
        with pytest.raises(ValueError, match="read-only"):
            array[...] = 0
        assert skellam._zhu_wang_terms((2, 3, 7)) is terms, name
