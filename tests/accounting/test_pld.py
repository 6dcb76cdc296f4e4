"""The pld accountant (docs/accounting.md §13): sound against independent references, tight, composing phases.

References: the exact one-step epsilon (closed-form hockey-stick divergence, solved by
bisection), and Google dp-accounting's PLD (a dev dependency, never imported by product
code): its optimistic discretisation is a lower bound on the true epsilon, its
pessimistic connect-the-dots one on a fine grid an upper bound.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import accounting
from accounting.accountants import ACCOUNTANTS, DEFAULT_ACCOUNTANT
from accounting.accountants import pld as pld_module
from accounting.events import ApproximateDpEvent, PoissonSampledGaussian, ZeroConcentratedDp
from tests.accounting.conftest import dp_pld_epsilon, pld_slack

# issue 26's table: (q, T, epsilon, delta) with dp-accounting's fine-grid sigma
ISSUE_TABLE = [
    (0.01, 30, 1.0, 1e-5, 0.831),
    (0.1, 100, 1.0, 1e-3, 2.753),
    (0.001, 2000, 0.5, 1e-6, 0.818),
    (0.1, 30, 3.0, 1e-5, 1.190),
]


def _dp_pld(phases: list[tuple[float, float, int]], delta: float, *, pessimistic: bool, interval: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    composed: Any = None
    for q, sigma, steps in phases:
        one = pld_lib.from_gaussian_mechanism(
            sigma,
            sampling_prob=q,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=interval,
            use_connect_dots=pessimistic,
        ).self_compose(steps)
        composed = one if composed is None else composed.compose(one)
    assert composed is not None
    return float(composed.get_epsilon_for_delta(delta))


def _random_cases(count: int, seed: int) -> list[tuple[float, float, int, float]]:
    """q in [1e-4, 1], sigma in [0.5, 20], T in [1, 5000], delta in [1e-8, 1e-2], log-uniform."""
    rng = np.random.default_rng(seed)
    return [
        (
            float(10 ** rng.uniform(-4, 0)),
            float(10 ** rng.uniform(math.log10(0.5), math.log10(20))),
            int(10 ** rng.uniform(0, math.log10(5000))),
            float(10 ** rng.uniform(-8, -2)),
        )
        for _ in range(count)
    ]


def _exact_one_step(q: float, sigma: float, delta: float) -> float:
    """The true epsilon of one step: the larger root of delta_dir(eps) = delta over both directions."""
    best = 0.0
    for direction in ("remove", "add"):
        if pld_module.single_delta(0.0, q, sigma, direction) <= delta:
            continue
        lo, hi = 0.0, 1.0
        while pld_module.single_delta(hi, q, sigma, direction) > delta:
            lo, hi = hi, 2 * hi
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if pld_module.single_delta(mid, q, sigma, direction) > delta else (lo, mid)
        best = max(best, hi)
    return best


@pytest.mark.parametrize("q, sigma, delta", [(1.0, 1.0, 1e-5), (0.01, 0.8, 1e-5), (0.3, 2.0, 1e-8), (1e-3, 0.6, 1e-3)])
def test_one_step_is_the_exact_epsilon_from_above(q: float, sigma: float, delta: float) -> None:
    exact = _exact_one_step(q, sigma, delta)
    ours = accounting.epsilon_of_events([PoissonSampledGaussian(sampling_rate=q, noise_multiplier=sigma, steps=1)], delta, accountant="pld").epsilon
    assert exact <= ours <= exact * 1.002 + 1e-6


def test_never_below_dp_accounting_lower_bound_nor_above_its_upper_bound() -> None:
    # a seeded random grid of the issue's ranges (T capped to keep the references quick);
    # docs/benchmarks.md §Issue 26 has the 200-case run
    for q, sigma, steps, delta in _random_cases(16, seed=26):
        steps = min(steps, 400)
        ours = pld_module.epsilon_of_phases([(q, sigma, steps)], delta)
        lower = _dp_pld([(q, sigma, steps)], delta, pessimistic=False, interval=1e-4)
        upper = _dp_pld([(q, sigma, steps)], delta, pessimistic=True, interval=1e-4)
        case = (q, sigma, steps, delta, ours, lower, upper)
        assert lower <= ours <= upper * 1.005 + 1e-4, case


@pytest.mark.parametrize("q, rounds, target, delta, table_sigma", ISSUE_TABLE)
def test_calibrated_sigma_within_half_a_percent_of_dp_accounting(
    q: float, rounds: int, target: float, delta: float, table_sigma: float
) -> None:
    result = accounting.noise_multiplier(q, rounds, target, delta, accountant="pld")
    sigma = result.noise_multiplier
    assert result.accountant_used == "pld" and not result.fallback and result.epsilon <= target
    # dp-accounting's fine-grid calibration lies in [sigma / 1.005, sigma * 1.005]: its epsilon
    # exceeds the target 0.5% below our sigma and meets it 0.5% above
    assert _dp_pld([(q, sigma * 0.995, rounds)], delta, pessimistic=True, interval=1e-4) > target
    assert _dp_pld([(q, sigma * 1.005, rounds)], delta, pessimistic=True, interval=1e-4) <= target
    assert abs(sigma - table_sigma) <= 0.005 * table_sigma


def _random_calibrations(count: int, seed: int) -> list[tuple[float, int, float, float]]:
    """q in [1e-3, 0.5], T in [1, 1000], epsilon in [0.3, 8], delta in [1e-7, 1e-3], log-uniform."""
    rng = np.random.default_rng(seed)
    return [
        (
            float(10 ** rng.uniform(-3, math.log10(0.5))),
            int(10 ** rng.uniform(0, 3)),
            float(10 ** rng.uniform(math.log10(0.3), math.log10(8))),
            float(10 ** rng.uniform(-7, -3)),
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize("q, rounds, target, delta", _random_calibrations(10, seed=2026))
def test_random_calibrations_meet_the_target_and_are_within_half_a_percent_of_dp_accounting(
    q: float, rounds: int, target: float, delta: float
) -> None:
    """Sound: dp-accounting's upper bound at our sigma is within its grid's error of the
    target; tight: 0.5% less noise misses the target by dp-accounting's own upper bound."""
    result = accounting.noise_multiplier(q, rounds, target, delta, accountant="pld")
    sigma = result.noise_multiplier
    assert result.epsilon <= target
    if result.fallback or sigma <= 1.01e-3:
        return  # answered by rdp (§13.2, §13.4) or already at the search floor: no tightness claim
    assert _dp_pld([(q, sigma, rounds)], delta, pessimistic=False, interval=1e-4) <= target
    assert _dp_pld([(q, sigma * 0.995, rounds)], delta, pessimistic=True, interval=1e-4) > target


def test_the_fft_rounding_bound_holds_and_is_counted() -> None:
    """docs/accounting.md §13.2: the l1 error of the FFT composition against the exact
    convolution (direct sums of non-negative numbers, relative error ~ n u) is within the
    bound, and that bound is what compose adds to delta."""
    rng = np.random.default_rng(7)
    n, steps = 2**12, 40
    x = np.zeros(n)
    x[:24] = rng.dirichlet(np.ones(24)) * 0.999  # a sub-pmf whose power stays inside the window
    exact = x[:24].copy()
    for _ in range(steps - 1):
        exact = np.convolve(exact, x[:24])
    computed = np.fft.irfft(np.fft.rfft(x) ** steps, n)
    bound = pld_module._FftErrorBound(n)
    bound.add_phase(float(np.linalg.norm(x)), steps)
    error = float(np.sum(np.abs(computed[: exact.size] - exact))) + float(np.sum(np.abs(computed[exact.size :])))
    assert error <= bound.l1()
    composed = pld_module.compose([(0.01, 1.0, 500)], 1e-5, "remove")
    assert composed.error >= pld_module._FftErrorBound(4096).l1()  # at least the smallest grid's bound


def test_where_the_error_terms_swamp_a_tiny_delta_rdp_answers_if_lower() -> None:
    """5,000 steps of q = 1e-4 at delta = 1e-8: the FFT rounding bound exceeds delta, so the
    PLD bound is inf; rdp's finite bound is the (sound) answer, marked."""
    events = [PoissonSampledGaussian(sampling_rate=1e-4, noise_multiplier=0.6, steps=5000)]
    report = accounting.epsilon_of_events(events, 1e-8, accountant="pld")
    rdp = accounting.epsilon_of_events(events, 1e-8, accountant="rdp")
    assert report.fallback and report.accountant_used == "rdp" and report.epsilon == rdp.epsilon
    assert "error terms" in (report.reason or "")
    assert _dp_pld([(1e-4, 0.6, 5000)], 1e-8, pessimistic=False, interval=1e-4) <= report.epsilon


def test_phases_compose_like_dp_accounting() -> None:
    phases = [(0.01, 1.0, 300), (0.05, 2.5, 100), (0.002, 0.7, 1000)]
    delta = 1e-6
    events = [PoissonSampledGaussian(sampling_rate=q, noise_multiplier=s, steps=t) for q, s, t in phases]
    ours = accounting.epsilon_of_events(events, delta, accountant="pld").epsilon
    lower = _dp_pld(phases, delta, pessimistic=False, interval=1e-4)
    upper = _dp_pld(phases, delta, pessimistic=True, interval=1e-4)
    assert lower <= ours <= upper * 1.005
    # more history never lowers epsilon; rdp stays above
    assert ours > accounting.epsilon_of_events(events[:2], delta, accountant="pld").epsilon
    assert ours < accounting.epsilon_of_events(events, delta, accountant="rdp").epsilon


def test_spent_phases_enter_every_question() -> None:
    spent = [PoissonSampledGaussian(sampling_rate=0.01, noise_multiplier=1.0, steps=200)]
    fresh = accounting.noise_multiplier(0.01, 200, 2.0, 1e-5, accountant="pld")
    after = accounting.noise_multiplier(0.01, 200, 2.0, 1e-5, accountant="pld", spent=spent)
    assert after.noise_multiplier > fresh.noise_multiplier and after.spent_epsilon is not None
    history = [*spent, PoissonSampledGaussian(sampling_rate=0.01, noise_multiplier=after.noise_multiplier, steps=200)]
    assert accounting.epsilon_of_events(history, 1e-5, accountant="pld").epsilon <= 2.0
    rate = accounting.sampling_rate(after.noise_multiplier, 200, 2.0, 1e-5, accountant="pld", spent=spent)
    assert rate.epsilon <= 2.0 and rate.sampling_rate >= 0.01 * (1 - 1e-3)
    count = accounting.rounds(0.01, after.noise_multiplier, 2.0, 1e-5, accountant="pld", spent=spent)
    assert count.rounds >= 200 * (1 - 1e-3) and count.epsilon <= 2.0


def test_zcdp_selection_falls_back_to_rdp_and_says_so() -> None:
    events = [PoissonSampledGaussian(sampling_rate=0.01, noise_multiplier=1.0, steps=100), ZeroConcentratedDp.exponential_mechanism(0.5, 3)]
    report = accounting.epsilon_of_events(events, 1e-5, accountant="pld")
    rdp = accounting.epsilon_of_events(events, 1e-5, accountant="rdp")
    assert report.fallback and report.accountant == "pld" and report.accountant_used == "rdp"
    assert report.epsilon == rdp.epsilon and "zcdp" in (report.reason or "")
    calibration = accounting.noise_multiplier(0.01, 100, 3.0, 1e-5, accountant="pld", spent=events[1:])
    assert calibration.fallback and calibration.accountant_used == "rdp"


def test_registered_with_rdp_behind_it() -> None:
    accountant = ACCOUNTANTS["pld"]
    assert accountant.verified_by == "pld" and accountant.per_round == "rdp" and accountant.fallback == "rdp"
    assert DEFAULT_ACCOUNTANT == "pld"  # the default since issue 26; rdp stays available by name


def _exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """The exact epsilon of mu-GDP (T Gaussians at q = 1 compose to mu = sqrt(T) / sigma):
    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong, Roth, Su 2019), by bisection."""
    from scipy.special import log_ndtr

    def excess(eps: float) -> float:
        return float(np.exp(log_ndtr(-eps / mu + mu / 2)) - np.exp(eps + log_ndtr(-eps / mu - mu / 2))) - delta

    lo, hi = 0.0, 1.0
    while excess(hi) > 0:
        lo, hi = hi, 2 * hi
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return hi


@pytest.mark.parametrize("sigma, steps, delta", [(0.88, 4361, 1.3e-5), (1.0, 100, 1e-5), (5.0, 3000, 1e-8), (0.5, 1, 1e-3)])
def test_full_participation_is_the_exact_gaussian_epsilon_from_above(sigma: float, steps: int, delta: float) -> None:
    # epsilons in the thousands once overflowed e^{-loss} in the delta-to-epsilon step (math domain error)
    exact = _exact_gaussian_epsilon(math.sqrt(steps) / sigma, delta)
    ours = pld_module.epsilon_of_phases([(1.0, sigma, steps)], delta)
    assert exact <= ours <= exact * 1.005, (exact, ours)
    assert ours <= accounting.epsilon(1.0, sigma, steps, delta).epsilon


def _gaussian_delta_mp(eps: float, mu: float) -> Any:
    """delta(eps) of the mu-Gaussian mechanism in 60-digit arithmetic (mpmath), independent of
    the product's floating-point evaluation."""
    import mpmath  # type: ignore[import-untyped]

    with mpmath.workdps(60):
        e, m = mpmath.mpf(eps), mpmath.mpf(mu)
        return mpmath.ncdf(m / 2 - e / m) - mpmath.exp(e) * mpmath.ncdf(-m / 2 - e / m)


@pytest.mark.parametrize(
    "phases, delta",
    [
        ([(1.0, 3.42, 10)], 1e-5),
        ([(1.0, 0.88, 4361)], 1.3e-5),
        ([(1.0, 5.0, 3000)], 1e-8),
        ([(1.0, 0.5, 1)], 1e-3),
        ([(1.0, 0.05, 3)], 1e-5),  # epsilon in the hundreds
        ([(1.0, 2.0, 40), (1.0, 0.9, 7), (1.0, 30.0, 1000)], 1e-6),  # phases of one mu
    ],
)
def test_full_participation_is_answered_exactly_in_closed_form(phases: list[tuple[float, float, int]], delta: float) -> None:
    """docs/accounting.md §13.8: a history where every phase has q = 1 is one Gaussian mechanism
    of mu = sqrt(sum T / sigma^2), answered by its exact delta(eps) rather than a grid: the
    epsilon meets delta in 60-digit arithmetic (sound) and is within 1e-9 of the exact one
    (a grid's discretisation left it 0.1-0.5% above), in a batch too."""
    mu = math.sqrt(sum(t / sigma**2 for _, sigma, t in phases))
    ours = pld_module.epsilon_of_phases(phases, delta)
    assert _gaussian_delta_mp(ours, mu) <= delta
    assert _gaussian_delta_mp(ours * (1 - 1e-9), mu) > delta
    assert pld_module.sound_epsilons([phases, [(0.5, 1.0, 10)]], delta)[0] == (ours, None)


def test_the_closed_form_is_sound_and_tight_on_random_mu_and_delta() -> None:
    """§13.8 on 200 seeded (mu, delta), mu in [1e-3, 1e3] and delta in [1e-14, 0.1]
    (epsilons from 0 to about 5e5): every answer meets delta in 60-digit arithmetic, and one
    smaller by 1e-8 of it (1e-9 near 0, where delta is flat in eps) does not."""
    rng = np.random.default_rng(2608)
    for _ in range(200):
        mu, delta = float(10 ** rng.uniform(-3, 3)), float(10 ** rng.uniform(-14, -1))
        ours = pld_module.gaussian_epsilon(mu, delta)
        assert math.isfinite(ours) and _gaussian_delta_mp(ours, mu) <= delta, (mu, delta)
        assert ours == 0.0 or _gaussian_delta_mp(ours - max(1e-8 * ours, 1e-9), mu) > delta, (mu, delta)


def test_large_epsilon_of_a_subsampled_history_is_finite_and_below_rdp() -> None:
    q, sigma, steps, delta = 0.913775685215951, 0.8847838896221095, 4361, 1.2998401795014147e-05
    ours = pld_module.epsilon_of_phases([(q, sigma, steps)], delta)
    assert math.isfinite(ours) and 0 < ours <= accounting.epsilon(q, sigma, steps, delta).epsilon
    assert ours >= _exact_gaussian_epsilon(math.sqrt(steps) / sigma, delta) * 0.5  # q < 1 lowers it a little


@pytest.mark.parametrize("q, sigma, steps", [(0.5, 0.001, 10), (1.0, 0.01, 1)])
def test_noise_near_the_search_floor_is_answered_soundly(q: float, sigma: float, steps: int) -> None:
    # single losses beyond e^700 once raised (NaN to int, math domain error) out of epsilon
    # and out of every calibration whose bracket walked down there
    report = accounting.epsilon(q, sigma, steps, 1e-5, accountant="pld")
    rdp = accounting.epsilon(q, sigma, steps, 1e-5).epsilon
    assert report.epsilon >= 0 and (report.epsilon <= rdp or report.fallback)
    if report.fallback:
        assert report.accountant_used == "rdp" and "pld" in (report.reason or "")


def test_full_batch_steps_of_tiny_noise_fall_back_to_rdp_instead_of_a_huge_grid() -> None:
    """q = 1, sigma 0.114, 50 steps (a silo plan of full-batch DP-SGD) put one step's pmf at
    4e14 grid points: numpy raised MemoryError (uncaught). Beside a subsampled phase it is
    answered by rdp, soundly; alone it is now one Gaussian mechanism, answered in closed form
    (§13.8), soundly and below rdp."""
    tiny = (1.0, 0.11415768711973885, 50)
    phases = [tiny, (0.5, 1.0, 10)]
    value, reason = pld_module.sound_epsilon(phases, 1e-5)
    assert reason is not None and "rdp" in reason
    events = [PoissonSampledGaussian(sampling_rate=q, noise_multiplier=z, steps=t) for q, z, t in phases]
    assert value == pytest.approx(accounting.epsilon_of_events(events, 1e-5, "rdp").epsilon)
    alone, reason = pld_module.sound_epsilon([tiny], 1e-5)
    assert reason is None and _gaussian_delta_mp(alone, math.sqrt(50) / tiny[1]) <= 1e-5
    assert alone < accounting.epsilon_of_events(events[:1], 1e-5, "rdp").epsilon


def _random_histories(count: int, seed: int) -> list[list[tuple[float, float, int]]]:
    """1-3 phases each: q in [1e-3, 1], sigma in [0.5, 10], T in [1, 3000], log-uniform."""
    rng = np.random.default_rng(seed)
    return [
        [
            (
                float(10 ** rng.uniform(-3, 0)),
                float(10 ** rng.uniform(math.log10(0.5), 1)),
                int(10 ** rng.uniform(0, math.log10(3000))),
            )
            for _ in range(int(rng.integers(1, 4)))
        ]
        for _ in range(count)
    ]


def test_many_histories_together_are_each_history_alone_bit_for_bit() -> None:
    """docs/accounting.md §13.6: composing histories together (one 2-D FFT per grid length)
    gives every history exactly its own answer, whatever else is in the batch and in any order
    (full participation, a single step and repeated histories included)."""
    histories = _random_histories(70, seed=2606) + [[(1.0, 1.0, 10)], [(1.0, 2.0, 1)], [(0.01, 1.0, 100)] * 2]
    histories += histories[:3]
    together = pld_module.sound_epsilons(histories, 1e-5)
    alone = [pld_module.sound_epsilon(h, 1e-5) for h in histories]
    assert together == alone
    assert pld_module.sound_epsilons(histories[::-1], 1e-5) == alone[::-1]
    assert all(reason is None and 0 <= value < math.inf for value, reason in together)


def test_the_accountants_batch_answers_like_one_call_each_fallbacks_included() -> None:
    """PldAccountant.epsilons (what plans and ledgers ask for many groups) is epsilon() per
    history: a zCDP selection falls back to rdp, marked, and so does a history whose error
    terms swamp delta (§13.2), in the same batch as ordinary ones."""
    accountant = ACCOUNTANTS["pld"]
    phase = PoissonSampledGaussian(sampling_rate=0.05, noise_multiplier=1.1, steps=200)
    histories: list[list[ApproximateDpEvent]] = [
        [phase],
        [phase, ZeroConcentratedDp(rho=0.01, steps=3)],
        [PoissonSampledGaussian(sampling_rate=1e-4, noise_multiplier=0.6, steps=5000)],
        [PoissonSampledGaussian(sampling_rate=0.3, noise_multiplier=2.0, steps=40), phase],
    ]
    batch = accountant.epsilons(histories, 1e-8)
    assert batch == [accountant.epsilon(h, 1e-8) for h in histories]
    assert [r.fallback for r in batch] == [False, True, True, False]


def test_histories_together_stay_between_dp_accountings_bounds() -> None:
    """The batched composition is sound and tight on multi-phase histories: never below
    dp-accounting's optimistic (lower-bound) epsilon, at most its fine pessimistic one + 1%."""
    pytest.importorskip("dp_accounting")
    histories = _random_histories(6, seed=26)
    for history, (value, reason) in zip(histories, pld_module.sound_epsilons(histories, 1e-6), strict=True):
        assert reason is None
        lower = _dp_pld(history, 1e-6, pessimistic=False, interval=1e-3)
        upper = _dp_pld(history, 1e-6, pessimistic=True, interval=1e-3)
        assert lower * (1 - 1e-9) <= value <= upper * 1.01 + 1e-9


@pytest.mark.parametrize("steps", [1, 2, 7, 99, 100, 500, 3000])
def test_binary_powering_is_within_the_counted_rounding_allowance(steps: int) -> None:
    """_integer_powers (§13.2): at any count its error against an extended-precision power is
    within ``(t - 1) sqrt 5 u`` (first order), inside the ``(t (pi + 1) + 4) u`` that
    _FftErrorBound counts for the power's rounding."""
    rng = np.random.default_rng(steps)
    radius = rng.uniform(0.9, 1.0, (3, 257)) ** (1 / steps)  # |s|^t stays visible
    spectra = radius * np.exp(1j * rng.uniform(-np.pi, np.pi, (3, 257)))
    ours = pld_module._integer_powers(spectra, np.full(3, steps))
    exact = spectra.astype(np.clongdouble) ** steps
    error = np.max(np.abs(ours.astype(np.clongdouble) - exact))
    assert float(error) <= (steps * (math.pi + 1) + 4) * 2.0**-53
    assert float(error) <= max(steps - 1, 1) * math.sqrt(5) * 2.0**-53 * 1.01


def test_a_composition_past_the_float_range_falls_back_to_rdp() -> None:
    """10^12 steps of q = 0.1: the composed pmf and its FFT rounding bound are NaN, so no grid
    point fitted the budget and ``Composed.epsilon`` raised IndexError, out of ``gdpfed account
    epsilon`` as a traceback (exit 1) and out of ``POST /v1/accounting/epsilon`` as a 500. It is
    a numerical failure of the PLD: rdp answers, marked (docs/accounting.md §13.4)."""
    events = [PoissonSampledGaussian(sampling_rate=0.1, noise_multiplier=1.5, steps=10**12)]
    report = accounting.epsilon_of_events(events, 1e-4, accountant="pld")
    rdp = accounting.epsilon_of_events(events, 1e-4, accountant="rdp")
    assert report.fallback and report.accountant_used == "rdp" and report.epsilon == rdp.epsilon
    assert report.reason == pld_module.PLD_NUMERICAL_FALLBACK
    # the same history as spent events of a calibration (the batched path): rdp's answer, refused
    with pytest.raises(accounting.InfeasibleError):
        accounting.noise_multiplier(0.1, 100, 1.0, 1e-4, accountant="pld", spent=events)


@pytest.mark.timeout(300)  # guards the hang this test is about; the answer takes well under a second
def test_steps_beyond_exact_float_integers_fall_back_to_rdp_instead_of_looping() -> None:
    """10^20 steps (2^63 and more do not fit numpy's int64): the binary powering got the step
    count as a negative int64, which halving never brings to 0, so ``gdpfed account epsilon
    --rounds 99999999999999999999`` never returned and the service answered 503 after its
    time limit. A phase of 2^53 steps or more (past exact float integers; the FFT rounding
    bound alone exceeds any delta long before) is a numerical failure: rdp answers, marked."""
    for steps in (2**53, 10**20):
        events = [PoissonSampledGaussian(sampling_rate=0.1, noise_multiplier=1.5, steps=steps)]
        report = accounting.epsilon_of_events(events, 1e-4, accountant="pld")
        rdp = accounting.epsilon_of_events(events, 1e-4, accountant="rdp")
        assert report.fallback and report.accountant_used == "rdp" and report.epsilon == rdp.epsilon
        assert report.reason == pld_module.PLD_NUMERICAL_FALLBACK
    with pytest.raises(accounting.InfeasibleError):  # rdp's answer: no sigma up to 10^4 meets it
        accounting.noise_multiplier(0.1, 10**20, 10**4, 1e-4, accountant="pld")


def test_a_numerical_fallback_states_its_reason_without_the_exception(caplog: pytest.LogCaptureFixture) -> None:
    """q = 0.5, sigma = 0.01: the grid's placement overflows and numpy raised 'negative
    dimensions are not allowed', which the reason quoted (``pld failed numerically (ValueError:
    ...)``) to ``gdpfed account`` and the service. The reason now says what the PLD could not
    represent and what answered instead; the exception is logged at debug level."""
    caplog.set_level("DEBUG", logger="gdpfed.accounting")
    report = accounting.epsilon(0.5, 0.01, 10, 1e-5, accountant="pld")
    assert report.fallback and report.accountant_used == "rdp"
    assert report.reason == pld_module.PLD_NUMERICAL_FALLBACK
    assert "Error" not in report.reason and "ValueError" in caplog.text


def test_delta_above_the_chance_of_being_sampled_needs_no_noise() -> None:
    """``gdpfed account noise-multiplier --accountant pld`` at delta 0.9, q = 0.1, T = 10 said
    noise_multiplier = 0.0234, 'achieved epsilon = 0', no note: below that sigma the grid failed
    and rdp's fallback (epsilon 5e4) made the search stop there, though every sigma meets the
    target: a client is sampled in some round with probability 1 - 0.9^10 = 0.65 <= delta, so the
    two outputs' total variation is at most delta and epsilon is exactly 0 (§13.4). pld now
    answers 0 there and the calibration sits at the floor, saying so."""
    report = accounting.epsilon(0.1, 0.01, 10, 0.9, accountant="pld")
    assert report.epsilon == 0.0 and not report.fallback and report.accountant_used == "pld"
    result = accounting.noise_multiplier(0.1, 10, 1.0, 0.9, accountant="pld")
    assert result.noise_multiplier == pytest.approx(pld_module.SIGMA_MIN, rel=1e-12)  # e^{log floor}
    assert result.epsilon == 0.0 and not result.fallback
    assert result.reason == f"the target is met already at the search floor noise_multiplier={pld_module.SIGMA_MIN:g}"
    # at the chance itself, or just below it, the grid answers as before (never optimistic)
    assert pld_module._never_told_apart([(0.5, 1.0, 1)], 0.5 * (1 + 2e-12))
    assert not pld_module._never_told_apart([(0.5, 1.0, 1)], 0.5)
    assert not pld_module._never_told_apart([(1.0, 1.0, 1)], 0.99)


@pytest.mark.parametrize(("q", "rounds", "delta"), [(0.3, 50, 0.9), (0.3, 50, 0.99), (1.0, 5, 0.9), (0.9, 3, 0.99)])
def test_large_delta_calibrations_are_not_below_dp_accounting(q: float, rounds: int, delta: float) -> None:
    """Deltas of 0.5-0.99 are in the domain (0, 1), and pld's answers there are sound: at the
    calibrated sigma its epsilon is not below dp-accounting's PLD beyond that one's own slack
    (never optimistic). Against dp-accounting's own calibration (calibrate_dp_mechanism) our
    sigma was 0.03-0.14% above its on these cases when this was written, never below."""
    result = accounting.noise_multiplier(q, rounds, 1.0, delta, accountant="pld")
    assert not result.fallback and result.epsilon <= 1.0
    reference = dp_pld_epsilon(q, result.noise_multiplier, rounds, delta)
    assert result.epsilon >= reference - pld_slack(rounds, reference), (result, reference)
