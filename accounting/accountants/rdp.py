"""The ``rdp`` accountant: Renyi DP curves, added up and converted (docs/accounting.md §2-§4, §7).

The default and the workhorse: every other accountant leans on it (closed_form is checked
by it, prv falls back to it, per-round logs and optimisation tables use it). Any
(epsilon, delta) event with an RDP curve composes here: the curves add at every order.
Calibrations search a proven bracket (:mod:`accounting.search`) on a subset of orders
and re-check the answer on the full grid, so the returned value never exceeds the target
under rdp.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from accounting import rdp, search
from accounting.accountants.base import (
    RATE_MIN,
    REL_TOL,
    ROUNDS_MAX,
    SIGMA_MAX,
    SIGMA_MIN,
    XTOL,
    Accountant,
    Answered,
    no_noise_meets,
    noise_result,
    rate_result,
    rounds_result,
    spent_exceeds,
)
from accounting.choices import AccountantName
from accounting.errors import InfeasibleError
from accounting.events import ApproximateDpEvent, PoissonSampledGaussian
from accounting.results import Calibration, EpsilonReport


class RdpAccountant(Accountant):
    name: ClassVar[AccountantName] = "rdp"
    verified_by: ClassVar[AccountantName] = "rdp"
    per_round: ClassVar[AccountantName] = "rdp"
    tabulated_by: ClassVar[AccountantName] = "rdp"
    # every (epsilon, delta) event has an RDP curve, and curves add (docs/accounting.md §4)
    supports: ClassVar[tuple[type[ApproximateDpEvent], ...]] = (ApproximateDpEvent,)

    def epsilon(
        self, events: list[ApproximateDpEvent], delta: float, *, time_limit_s: float | None = None
    ) -> EpsilonReport:
        """min over the full order grid of the §3 conversion of the summed curves (docs/accounting.md §3-§4)."""
        grid = rdp.order_grid()
        value, order = rdp.epsilon_from_rdp(grid.orders, composed_rdp(events, grid), delta)
        return EpsilonReport(
            epsilon=value, delta=delta, accountant=self.name, accountant_used=self.name, optimal_order=order
        )

    def epsilons(self, histories: list[list[ApproximateDpEvent]], delta: float) -> list[EpsilonReport]:
        """:meth:`epsilon` of every history, equal to it bit for bit (docs/accounting.md §3-§4).

        The curves of all sampled-Gaussian events are computed in one batch
        (:func:`rdp.rdp_curves`), each history's summed in its own order, and every
        history converted at once; a verification of a 1,000-group plan spent 1.5 s
        computing the curves one group at a time.
        """
        grid = rdp.order_grid()
        flat = [event for events in histories for event in events]
        sampled = [k for k, event in enumerate(flat) if isinstance(event, PoissonSampledGaussian)]
        curves: list[np.ndarray | None] = [None] * len(flat)
        if sampled:
            rows = rdp.rdp_curves(
                np.array([flat[k].sampling_rate for k in sampled]),  # type: ignore[attr-defined]
                np.array([flat[k].noise_multiplier for k in sampled]),  # type: ignore[attr-defined]
                grid,
            )
            for row, k in zip(rows, sampled):
                curves[k] = flat[k].steps * row  # type: ignore[attr-defined]  # as PoissonSampledGaussian.rdp
        totals = np.empty((len(histories), grid.orders.size))
        position = 0
        for h, events in enumerate(histories):
            total = np.zeros(grid.orders.size)  # composed_rdp's sum, in the same order
            for event in events:
                curve = curves[position]
                total = total + (event.rdp(grid) if curve is None else curve)
                position += 1
            totals[h] = total
        eps = rdp.conversion_epsilons(grid.orders, totals, delta)
        best = np.argmin(eps, axis=1) if len(histories) else np.zeros(0, dtype=int)
        return [
            EpsilonReport(
                epsilon=max(0.0, float(eps[h, best[h]])), delta=delta, accountant=self.name,
                accountant_used=self.name, optimal_order=float(grid.orders[best[h]]),
            )
            for h in range(len(histories))
        ]

    def noise_multiplier(
        self,
        sampling_rate: float,
        rounds: int,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        raw: bool = False,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """docs/accounting.md §7.1: a guided search on log sigma, re-checked on the full grid."""
        q, t = sampling_rate, rounds
        grid = rdp.order_grid()
        spent_curve, spent_eps = _spent_rdp(spent, delta, target, grid)
        sigma, at_floor, achieved = _sigma_search(grid, q, t, target, delta, spent_curve, spent_eps)
        return noise_result(
            Answered(q, sigma, t, delta, target, achieved, self.name, spent_eps if spent else None), at_floor=at_floor
        )

    def sampling_rate(
        self,
        noise_multiplier: float,
        rounds: int,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """docs/accounting.md §7.3: q = 1 if it fits, else a bracket on -log q."""
        sigma, t = noise_multiplier, rounds
        grid = rdp.order_grid()
        spent_curve, spent_eps = _spent_rdp(spent, delta, target, grid)
        rate = _rate_search(grid, sigma, t, target, delta, spent_curve)
        achieved = full_epsilon(grid, spent_curve, rate, sigma, t, delta)
        return rate_result(Answered(rate, sigma, t, delta, target, achieved, self.name, spent_eps if spent else None))

    def rounds(
        self,
        sampling_rate: float,
        noise_multiplier: float,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """docs/accounting.md §7.4: one step curve, then an exponential and binary integer search."""
        q, sigma = sampling_rate, noise_multiplier
        grid = rdp.order_grid()
        spent_curve, spent_eps = _spent_rdp(spent, delta, target, grid)
        count = _rounds_search(grid, q, sigma, target, delta, spent_curve)
        return rounds_result(
            count,
            q,
            sigma,
            delta,
            target,
            achieved=full_epsilon(grid, spent_curve, q, sigma, count, delta) if count else spent_eps,
            accountant=self.name,
            used=self.name,
            spent_epsilon=spent_eps if spent else None,
        )

    def noise_multipliers_batch(
        self, sampling_rates: np.ndarray, rounds: int, epsilons: np.ndarray, delta: float
    ) -> np.ndarray:
        """The §7.1 search for every point at once (docs/accounting.md §7.6); inf where infeasible.

        ``sampling_rates`` and ``epsilons`` are validated 1-D float arrays of one length.
        """
        q, eps, t = sampling_rates, epsilons, rounds
        if q.size == 0:
            return np.zeros(0)
        grid = rdp.order_grid()

        def g(points: np.ndarray, x: np.ndarray) -> np.ndarray:
            values = rdp.windowed_epsilons(grid, q[points], np.exp(x), t, delta)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                out = np.log(values / eps[points])
            return np.where(np.isnan(out), np.inf, out)

        x0 = np.log(sigma_guess(q, t, eps, delta))
        return np.exp(search.vector_search(g, x0, math.log(SIGMA_MIN), math.log(SIGMA_MAX), XTOL))


# --------------------------------------------------------------------------- helpers


def composed_rdp(events: list[ApproximateDpEvent], grid: rdp.OrderGrid) -> np.ndarray:
    """The RDP curve of the events composed: the sum of their curves (docs/accounting.md §4)."""
    total = np.zeros(grid.orders.size)
    for event in events:
        total = total + event.rdp(grid)
    return total


def _spent_rdp(
    events: list[ApproximateDpEvent], delta: float, target: float, grid: rdp.OrderGrid
) -> tuple[np.ndarray | None, float]:
    """RDP curve and epsilon of the spent events; InfeasibleError if they exceed the target."""
    if not events:
        return None, 0.0
    curve = composed_rdp(events, grid)
    spent_eps = rdp.epsilon_from_rdp(grid.orders, curve, delta)[0]
    if spent_eps > target:
        raise spent_exceeds(spent_eps, target)
    return curve, spent_eps


def full_epsilon(
    grid: rdp.OrderGrid, spent_curve: np.ndarray | None, q: float, sigma: float, t: int, delta: float
) -> float:
    """Full-grid epsilon of the spent curve plus T steps of (q, sigma) (docs/accounting.md §3)."""
    curve = t * rdp.rdp_curve(q, sigma, grid)
    if spent_curve is not None:
        curve = curve + spent_curve
    return rdp.epsilon_from_rdp(grid.orders, curve, delta)[0]


def _sigma_search(
    grid: rdp.OrderGrid,
    q: float,
    t: int,
    target: float,
    delta: float,
    spent_curve: np.ndarray | None,
    spent_eps: float,
) -> tuple[float, bool, float]:
    """(sigma, at_floor, achieved) under rdp: ``achieved``, the full-grid epsilon of sigma, is <= target."""
    windowed, model = rdp.single_point_epsilons(grid, q, t, delta, spent_curve)

    def g(x: float) -> float:
        return search.log_ratio(windowed(math.exp(x)), target)

    remaining = max(target - spent_eps, 0.05 * target)
    guess = float(sigma_guess(np.array([q]), t, np.array([remaining]), delta)[0])

    def g_model(x: float) -> float:
        return search.log_ratio(model(math.exp(x)), target)

    try:
        found = search.guided(g, g_model, math.log(guess), math.log(SIGMA_MIN), math.log(SIGMA_MAX), XTOL)
    except search.NoFeasiblePoint:
        raise no_noise_meets(target, q, t, delta) from None
    sigma = math.exp(found.hi)
    # Windowed orders are a subset of the grid, so this holds by construction; the loop
    # guards against rounding at the last digit.
    achieved = full_epsilon(grid, spent_curve, q, sigma, t, delta)
    for _ in range(50):
        if achieved <= target:
            break
        sigma *= 1.0 + REL_TOL
        achieved = full_epsilon(grid, spent_curve, q, sigma, t, delta)
    return sigma, found.at_floor, achieved


def _rate_search(
    grid: rdp.OrderGrid, sigma: float, t: int, target: float, delta: float, spent_curve: np.ndarray | None
) -> float:
    sa = np.array([sigma])

    def g(x: float) -> float:  # x = -log q: larger x, smaller q, smaller epsilon
        rate = min(1.0, math.exp(-x))
        value = rdp.windowed_epsilons(grid, np.array([rate]), sa, t, delta, spent_curve)[0]
        return search.log_ratio(float(value), target)

    if full_epsilon(grid, spent_curve, 1.0, sigma, t, delta) <= target:
        return 1.0
    guess = rate_guess(sigma, t, target, delta)
    try:
        found = search.bracket(g, -math.log(guess), 0.0, -math.log(RATE_MIN))
    except search.NoFeasiblePoint:
        raise InfeasibleError(
            f"even sampling_rate={RATE_MIN:g} exceeds epsilon={target:g} at noise_multiplier={sigma:g}, "
            f"rounds={t}, delta={delta:g}"
        ) from None
    found = search.refine(g, found, XTOL)
    rate = min(1.0, math.exp(-found.hi))
    for _ in range(50):
        if full_epsilon(grid, spent_curve, rate, sigma, t, delta) <= target:
            break
        rate *= 1.0 - REL_TOL
    return rate


def _rounds_search(
    grid: rdp.OrderGrid, q: float, sigma: float, target: float, delta: float, spent_curve: np.ndarray | None
) -> int:
    """Largest T with full-grid eps <= target: one step curve, then an integer search."""
    step = rdp.rdp_curve(q, sigma, grid)
    base = np.zeros_like(step) if spent_curve is None else spent_curve

    def fits(count: int) -> bool:
        return rdp.epsilon_from_rdp(grid.orders, base + count * step, delta)[0] <= target

    return search.integer_search(fits, ROUNDS_MAX)


def _gaussian_rate(t: float, eps: np.ndarray, delta: float) -> np.ndarray:
    """rho with eps ~= min_a [T a rho + (ln(1/delta) - ln a)/(a - 1) - 1/a] (docs/accounting.md §7.1).

    The per-step RDP slope rho of a mechanism whose curve is linear in the order (the
    Gaussian's is a / (2 sigma^2)); two fixed-point passes for the order's terms.
    """
    log_inv_delta = math.log(1.0 / delta)
    eff_log, eff_eps = np.full_like(eps, log_inv_delta), eps
    # Extreme inputs may give inf/nan here; this only seeds the search, which checks
    # every point it uses, so the floating-point warnings are noise.
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for _ in range(2):
            total = (np.sqrt(eff_log + eff_eps) - np.sqrt(eff_log)) ** 2
            alpha = 1.0 + np.sqrt(eff_log / np.maximum(total, 1e-300))
            eff_log = np.maximum(log_inv_delta - np.log(alpha), 0.1 * log_inv_delta)
            eff_eps = eps + 1.0 / alpha
        return (np.sqrt(eff_log + eff_eps) - np.sqrt(eff_log)) ** 2 / t


def sigma_guess(q: np.ndarray, t: int, eps: np.ndarray, delta: float) -> np.ndarray:
    """A starting sigma: the small-q RDP slope q^2 (e^{1/sigma^2} - 1) / 2 set equal to
    :func:`_gaussian_rate` and solved for sigma. Only a starting point for the search."""
    rho = _gaussian_rate(t, eps, delta)
    # rho and q * q may both underflow to 0 (0 / 0 = nan): nan_to_num takes it to 1.0 below
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        guess = 1.0 / np.sqrt(np.log1p(2.0 * rho / (q * q)))
    return np.clip(np.nan_to_num(guess, nan=1.0, posinf=SIGMA_MAX), SIGMA_MIN, SIGMA_MAX)


def rounds_guess(q: float, sigma: float, eps: float, delta: float) -> int:
    """A starting T for pld's rounds search (docs/accounting.md §7.4): the same slope, and the
    rounds whose total meets :func:`_gaussian_rate` at one round. Only a starting point: it
    needs no order grid (building rdp's costs a cold process about 0.1 s)."""
    total = float(_gaussian_rate(1, np.array([eps]), delta)[0])
    slope = 0.5 * q * q * math.expm1(min(1.0 / sigma**2, 700.0))
    value = total / slope if slope > 0 else math.inf
    return int(min(max(value, 1.0), float(ROUNDS_MAX))) if value == value else 1


def rate_guess(sigma: float, t: int, eps: float, delta: float) -> float:
    """A starting q for :func:`sampling_rate`: the same slope solved for q."""
    rho = float(_gaussian_rate(t, np.array([eps]), delta)[0])
    value = math.sqrt(2.0 * rho / math.expm1(min(1.0 / sigma**2, 700.0)))
    return min(1.0, max(RATE_MIN, value))
