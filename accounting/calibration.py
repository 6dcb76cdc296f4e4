"""Inverse questions: the noise multiplier, sampling rate or rounds that meet a target.

docs/accounting.md §7. Every answer comes from a proven bracket (:mod:`accounting.search`)
and is the evaluated, feasible end of it, then re-checked on the full order grid, so the
returned value never exceeds the target under the accountant that produced it. With
``spent`` phases the question is about the remaining budget: the new phase is composed
after them (docs/accounting.md §7.5).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from accounting import closed_form, prv, rdp, search
from accounting.errors import InfeasibleError, InvalidInputError
from accounting.mechanism import Phase, validate_phases
from accounting.results import ACCOUNTANTS, Accountant, Calibration
from accounting.validation import (
    validate_accountant,
    validate_count,
    validate_delta,
    validate_positive,
    validate_sampling_rate,
)

# Search limits (docs/accounting.md §7.1): answers outside them are reported, never clamped silently.
SIGMA_MIN = 1e-3
SIGMA_MAX = 1e4
RATE_MIN = 1e-12
ROUNDS_MAX = 10**9
REL_TOL = 1e-4  # relative tolerance of sigma and q

_XTOL = math.log1p(REL_TOL)


# --------------------------------------------------------------------------- public API


def closed_form_noise_multiplier(sampling_rate: float, rounds: int, epsilon: float, delta: float) -> float:
    """The GDPFed paper's raw bound sqrt(7 q^2 T (eps + 2 ln(1/delta))) / eps (docs/accounting.md §6).

    Unchecked: it under-noises outside its lemma's conditions. Use
    ``noise_multiplier(..., accountant="closed_form")`` for the checked answer.
    """
    q, t, eps, delta = _validate_common(sampling_rate=sampling_rate, rounds=rounds, epsilon=epsilon, delta=delta)
    return closed_form.closed_form_sigma(q, t, eps, delta)


def noise_multiplier(
    sampling_rate: float,
    rounds: int,
    epsilon: float,
    delta: float,
    accountant: Accountant = "rdp",
    *,
    spent: Sequence[Phase] = (),
    raw: bool = False,
    time_limit_s: float | None = None,
) -> Calibration:
    """Smallest sigma (relative tolerance 1e-4) with eps(spent + (q, sigma, T)) <= epsilon.

    docs/accounting.md §7.1 (rdp), §7.2 (prv, calibrated on the PRV upper bound), §6.2 (closed_form:
    the formula, checked by rdp and replaced by the rdp sigma when it misses the target,
    unless ``raw``). Raises InfeasibleError when the spent phases alone exceed the target
    or when sigma would exceed ``SIGMA_MAX``.
    """
    q, t, eps, delta = _validate_common(sampling_rate=sampling_rate, rounds=rounds, epsilon=epsilon, delta=delta)
    name = validate_accountant(accountant, ACCOUNTANTS)
    if not isinstance(raw, bool):
        raise InvalidInputError("raw", "must be true or false")
    if raw and name != "closed_form":
        raise InvalidInputError("raw", "only applies to accountant='closed_form'")
    phases = _validate_spent(spent, name)

    if name == "closed_form":
        return _closed_form_noise(q, t, eps, delta, raw)
    if name == "rdp":
        return _rdp_noise(q, t, eps, delta, phases)
    return _prv_noise(q, t, eps, delta, phases, time_limit_s)


def sampling_rate(
    noise_multiplier: float,
    rounds: int,
    epsilon: float,
    delta: float,
    accountant: Accountant = "rdp",
    *,
    spent: Sequence[Phase] = (),
    time_limit_s: float | None = None,
) -> Calibration:
    """Largest q in (0, 1] (relative tolerance 1e-4) meeting the target (docs/accounting.md §7.3).

    Raises InfeasibleError if even q = ``RATE_MIN`` exceeds it.
    """
    sigma = validate_positive("noise_multiplier", noise_multiplier)
    t = validate_count("rounds", rounds)
    eps = validate_positive("epsilon", epsilon)
    delta = validate_delta(delta)
    name = validate_accountant(accountant, ACCOUNTANTS)
    phases = _validate_spent(spent, name)
    if name == "closed_form":
        return _closed_form_rate(sigma, t, eps, delta)
    if name == "rdp":
        return _rdp_rate(sigma, t, eps, delta, phases)
    return _prv_rate(sigma, t, eps, delta, phases, time_limit_s)


def rounds(
    sampling_rate: float,
    noise_multiplier: float,
    epsilon: float,
    delta: float,
    accountant: Accountant = "rdp",
    *,
    spent: Sequence[Phase] = (),
    time_limit_s: float | None = None,
) -> Calibration:
    """Most rounds T (0 allowed) with eps(spent + (q, sigma, T)) <= epsilon (docs/accounting.md §7.4).

    With T = 0 the achieved epsilon is that of the spent phases (0 without any) and
    ``reason`` says that not even one round fits. Raises InfeasibleError if the spent
    phases alone exceed the target.
    """
    q = validate_sampling_rate(sampling_rate)
    sigma = validate_positive("noise_multiplier", noise_multiplier)
    eps = validate_positive("epsilon", epsilon)
    delta = validate_delta(delta)
    name = validate_accountant(accountant, ACCOUNTANTS)
    phases = _validate_spent(spent, name)
    if name == "closed_form":
        return _closed_form_rounds(q, sigma, eps, delta)
    if name == "rdp":
        return _rdp_rounds(q, sigma, eps, delta, phases)
    return _prv_rounds(q, sigma, eps, delta, phases, time_limit_s)


def noise_multipliers_rdp(
    sampling_rates: np.ndarray, rounds: int, epsilons: np.ndarray, delta: float
) -> np.ndarray:
    """Vectorised rdp calibration: sigma for every (q, eps) of the broadcast arrays.

    The same search as :func:`noise_multiplier` with ``accountant="rdp"`` (docs/accounting.md §7.1,
    §7.6), run for all points at once: every finite returned sigma meets its target under
    rdp (it is the evaluated feasible end of its own bracket). A point that no sigma up
    to ``SIGMA_MAX`` satisfies gets ``inf``; a point met already at ``SIGMA_MIN`` gets
    ``SIGMA_MIN``. Returns an array of the broadcast shape.
    """
    q_in = _finite_array("sampling_rates", sampling_rates)
    eps_in = _finite_array("epsilons", epsilons)
    if np.any((q_in <= 0) | (q_in > 1)):
        raise InvalidInputError("sampling_rates", "every value must be in (0, 1]")
    if np.any(eps_in <= 0):
        raise InvalidInputError("epsilons", "every value must be > 0")
    t = validate_count("rounds", rounds)
    delta = validate_delta(delta)
    q_b, eps_b = np.broadcast_arrays(q_in, eps_in)
    shape = q_b.shape
    q = q_b.reshape(-1).astype(float)
    eps = eps_b.reshape(-1).astype(float)
    if q.size == 0:
        return np.zeros(shape)
    grid = rdp.order_grid()

    def g(points: np.ndarray, x: np.ndarray) -> np.ndarray:
        values = rdp.windowed_epsilons(grid, q[points], np.exp(x), t, delta)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.log(values / eps[points])
        return np.where(np.isnan(out), np.inf, out)

    hi = _vector_search(g, np.log(_sigma_guess(q, t, eps, delta)), math.log(SIGMA_MIN), math.log(SIGMA_MAX))
    return np.exp(hi).reshape(shape)


# --------------------------------------------------------------------------- rdp


def _rdp_noise(q: float, t: int, target: float, delta: float, phases: list[Phase]) -> Calibration:
    grid = rdp.order_grid()
    spent_curve, spent_eps = _spent_rdp(phases, delta, target, grid)
    sigma, at_floor, achieved = _rdp_sigma_search(grid, q, t, target, delta, spent_curve, spent_eps)
    reason = None
    if at_floor:
        reason = f"the target is met already at the search floor noise_multiplier={SIGMA_MIN:g}"
    return Calibration(
        solved_for="noise_multiplier",
        sampling_rate=q,
        noise_multiplier=sigma,
        rounds=t,
        delta=delta,
        target_epsilon=target,
        epsilon=achieved,
        accountant="rdp",
        accountant_used="rdp",
        reason=reason,
        spent_epsilon=spent_eps if phases else None,
    )


def _rdp_sigma_search(
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
    guess = float(_sigma_guess(np.array([q]), t, np.array([remaining]), delta)[0])

    def g_model(x: float) -> float:
        return search.log_ratio(model(math.exp(x)), target)

    try:
        found = search.guided(g, g_model, math.log(guess), math.log(SIGMA_MIN), math.log(SIGMA_MAX), _XTOL)
    except search.NoFeasiblePoint:
        raise InfeasibleError(
            f"no noise_multiplier up to {SIGMA_MAX:g} meets epsilon={target:g} at sampling_rate={q:g}, "
            f"rounds={t}, delta={delta:g}"
        ) from None
    sigma = math.exp(found.hi)
    # Windowed orders are a subset of the grid, so this holds by construction; the loop
    # guards against rounding at the last digit.
    achieved = _full_epsilon(grid, spent_curve, q, sigma, t, delta)
    for _ in range(50):
        if achieved <= target:
            break
        sigma *= 1.0 + REL_TOL
        achieved = _full_epsilon(grid, spent_curve, q, sigma, t, delta)
    return sigma, found.at_floor, achieved


def _rdp_rate(sigma: float, t: int, target: float, delta: float, phases: list[Phase]) -> Calibration:
    grid = rdp.order_grid()
    spent_curve, spent_eps = _spent_rdp(phases, delta, target, grid)
    rate = _rdp_rate_search(grid, sigma, t, target, delta, spent_curve)
    achieved = _full_epsilon(grid, spent_curve, rate, sigma, t, delta)
    return Calibration(
        solved_for="sampling_rate",
        sampling_rate=rate,
        noise_multiplier=sigma,
        rounds=t,
        delta=delta,
        target_epsilon=target,
        epsilon=achieved,
        accountant="rdp",
        accountant_used="rdp",
        reason="every client in every round (sampling_rate=1) meets the target" if rate == 1.0 else None,
        spent_epsilon=spent_eps if phases else None,
    )


def _rdp_rate_search(
    grid: rdp.OrderGrid, sigma: float, t: int, target: float, delta: float, spent_curve: np.ndarray | None
) -> float:
    sa = np.array([sigma])

    def g(x: float) -> float:  # x = -log q: larger x, smaller q, smaller epsilon
        rate = min(1.0, math.exp(-x))
        value = rdp.windowed_epsilons(grid, np.array([rate]), sa, t, delta, spent_curve)[0]
        return search.log_ratio(float(value), target)

    if _full_epsilon(grid, spent_curve, 1.0, sigma, t, delta) <= target:
        return 1.0
    guess = _rate_guess(sigma, t, target, delta)
    try:
        found = search.bracket(g, -math.log(guess), 0.0, -math.log(RATE_MIN))
    except search.NoFeasiblePoint:
        raise InfeasibleError(
            f"even sampling_rate={RATE_MIN:g} exceeds epsilon={target:g} at noise_multiplier={sigma:g}, "
            f"rounds={t}, delta={delta:g}"
        ) from None
    found = search.refine(g, found, _XTOL)
    rate = min(1.0, math.exp(-found.hi))
    for _ in range(50):
        if _full_epsilon(grid, spent_curve, rate, sigma, t, delta) <= target:
            break
        rate *= 1.0 - REL_TOL
    return rate


def _rdp_rounds(q: float, sigma: float, target: float, delta: float, phases: list[Phase]) -> Calibration:
    grid = rdp.order_grid()
    spent_curve, spent_eps = _spent_rdp(phases, delta, target, grid)
    count = _rdp_rounds_search(grid, q, sigma, target, delta, spent_curve)
    return _rounds_result(
        count,
        q,
        sigma,
        delta,
        target,
        achieved=_full_epsilon(grid, spent_curve, q, sigma, count, delta) if count else spent_eps,
        accountant="rdp",
        used="rdp",
        spent_eps=spent_eps if phases else None,
    )


def _rdp_rounds_search(
    grid: rdp.OrderGrid, q: float, sigma: float, target: float, delta: float, spent_curve: np.ndarray | None
) -> int:
    """Largest T with full-grid eps <= target: one step curve, then an integer search."""
    step = rdp.rdp_curve(q, sigma, grid)
    base = np.zeros_like(step) if spent_curve is None else spent_curve

    def fits(count: int) -> bool:
        return rdp.epsilon_from_rdp(grid.orders, base + count * step, delta)[0] <= target

    return _integer_search(fits, ROUNDS_MAX)


def _integer_search(fits: Callable[[int], bool], upper: int) -> int:
    """Largest n in [0, upper] with fits(n), for fits monotone (true then false); fits(0) assumed."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= upper and fits(hi):
        lo, hi = hi, hi * 2
    if hi > upper:
        if fits(upper):
            return upper
        hi = upper
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------- prv


def _prv_noise(
    q: float, t: int, target: float, delta: float, phases: list[Phase], time_limit_s: float | None
) -> Calibration:
    try:
        fallback = _rdp_noise(q, t, target, delta, phases)
        start = fallback.noise_multiplier
        rdp_error: InfeasibleError | None = None
    except InfeasibleError as exc:  # PRV is tighter and may still find an answer
        fallback, rdp_error = None, exc
        start = float(_sigma_guess(np.array([q]), t, np.array([target]), delta)[0])
    spent = [_as_tuple(p) for p in phases]
    outcome = _fenced_or_fallback(
        _prv_noise_job, (q, t, target, delta, spent, start), time_limit_s, fallback, rdp_error
    )
    if isinstance(outcome, Calibration):
        return outcome
    sigma, bounds, spent_upper, at_floor = outcome
    return Calibration(
        solved_for="noise_multiplier",
        sampling_rate=q,
        noise_multiplier=sigma,
        rounds=t,
        delta=delta,
        target_epsilon=target,
        epsilon=bounds[2],
        accountant="prv",
        accountant_used="prv",
        reason=f"the target is met already at the search floor noise_multiplier={SIGMA_MIN:g}" if at_floor else None,
        spent_epsilon=spent_upper,
    )


def _fenced_or_fallback(
    job: Any,
    args: tuple[Any, ...],
    time_limit_s: float | None,
    fallback: Calibration | None,
    rdp_error: InfeasibleError | None,
) -> Any:
    """Run a PRV calibration job in its fenced child process (docs/accounting.md §5.3).

    Returns the job's result, or, when PRV fails, times out or returns bad numbers, rdp's
    answer for the same question marked ``fallback`` with the reason. With no rdp answer
    either, the question is infeasible under both accountants.
    """
    limit = prv.CALIBRATION_TIME_LIMIT_S if time_limit_s is None else time_limit_s
    try:
        return prv.run_isolated(job, args, limit)
    except prv.PrvFailure as failure:
        if fallback is None:
            raise InfeasibleError(f"{rdp_error.message if rdp_error else ''} (prv: {failure.reason})") from None
        return fallback.model_copy(
            update={"accountant": "prv", "fallback": True, "reason": f"{failure.reason}; fell back to rdp"}
        )


def _prv_noise_job(
    q: float, t: int, target: float, delta: float, spent: list[tuple[float, float, int]], start: float
) -> tuple[float, tuple[float, float, float], float | None, bool]:
    """Runs in the PRV child: spent check, then the sigma search (docs/accounting.md §7.2)."""
    spent_upper = _prv_spent_upper(spent, delta, target)
    sigma, bounds, at_floor = prv.calibrate_sigma_in_process(
        q, t, target, delta, spent, start, SIGMA_MIN, SIGMA_MAX, _XTOL
    )
    return sigma, bounds, spent_upper, at_floor


def _prv_spent_upper(spent: list[tuple[float, float, int]], delta: float, target: float) -> float | None:
    if not spent:
        return None
    upper = prv.bounds_in_process(spent, delta, prv.eps_error_for(target))[2]
    if upper > target:
        raise _SpentExceeds(upper)
    return upper


class _SpentExceeds(prv.PrvFailure):
    def __init__(self, upper: float) -> None:
        super().__init__(f"prv: the spent phases alone have epsilon {upper:.6g} above the target")


def _prv_rate(
    sigma: float, t: int, target: float, delta: float, phases: list[Phase], time_limit_s: float | None
) -> Calibration:
    try:
        fallback = _rdp_rate(sigma, t, target, delta, phases)
        start = fallback.sampling_rate
        rdp_error: InfeasibleError | None = None
    except InfeasibleError as exc:
        fallback, rdp_error, start = None, exc, RATE_MIN
    spent = [_as_tuple(p) for p in phases]
    outcome = _fenced_or_fallback(
        _prv_rate_job, (sigma, t, target, delta, spent, start), time_limit_s, fallback, rdp_error
    )
    if isinstance(outcome, Calibration):
        return outcome
    rate, bounds, spent_upper = outcome
    return Calibration(
        solved_for="sampling_rate",
        sampling_rate=rate,
        noise_multiplier=sigma,
        rounds=t,
        delta=delta,
        target_epsilon=target,
        epsilon=bounds[2],
        accountant="prv",
        accountant_used="prv",
        reason="every client in every round (sampling_rate=1) meets the target" if rate == 1.0 else None,
        spent_epsilon=spent_upper,
    )


def _prv_rate_job(
    sigma: float, t: int, target: float, delta: float, spent: list[tuple[float, float, int]], start: float
) -> tuple[float, tuple[float, float, float], float | None]:
    spent_upper = _prv_spent_upper(spent, delta, target)
    rate, bounds = prv.sampling_rate_in_process(sigma, t, target, delta, spent, start, RATE_MIN, _XTOL)
    return rate, bounds, spent_upper


def _prv_rounds(
    q: float, sigma: float, target: float, delta: float, phases: list[Phase], time_limit_s: float | None
) -> Calibration:
    try:
        fallback = _rdp_rounds(q, sigma, target, delta, phases)
        start = fallback.rounds
        rdp_error: InfeasibleError | None = None
    except InfeasibleError as exc:
        fallback, rdp_error, start = None, exc, 1
    spent = [_as_tuple(p) for p in phases]
    outcome = _fenced_or_fallback(
        _prv_rounds_job, (q, sigma, target, delta, spent, start), time_limit_s, fallback, rdp_error
    )
    if isinstance(outcome, Calibration):
        return outcome
    count, bounds, spent_upper = outcome
    achieved = bounds[2] if bounds is not None else (spent_upper if spent_upper is not None else 0.0)
    return _rounds_result(count, q, sigma, delta, target, achieved, "prv", "prv", spent_upper)


def _prv_rounds_job(
    q: float, sigma: float, target: float, delta: float, spent: list[tuple[float, float, int]], start: int
) -> tuple[int, tuple[float, float, float] | None, float | None]:
    spent_upper = _prv_spent_upper(spent, delta, target)
    count, bounds = prv.rounds_in_process(q, sigma, target, delta, spent, max(start, 1), ROUNDS_MAX)
    return count, bounds, spent_upper


# --------------------------------------------------------------------------- closed form


def _closed_form_noise(q: float, t: int, target: float, delta: float, raw: bool) -> Calibration:
    grid = rdp.order_grid()
    sigma = closed_form.closed_form_sigma(q, t, target, delta)
    checked = _full_epsilon(grid, None, q, sigma, t, delta)
    common = dict(
        solved_for="noise_multiplier", sampling_rate=q, rounds=t, delta=delta, target_epsilon=target,
        accountant="closed_form",
    )
    if checked <= target:
        return Calibration(
            **common, noise_multiplier=sigma, epsilon=checked, accountant_used="closed_form", sound=True,
            reason=f"closed form; rdp confirms epsilon={checked:.6g} <= target",
        )
    if raw:
        return Calibration(
            **common, noise_multiplier=sigma, epsilon=checked, accountant_used="closed_form", sound=False,
            reason=f"raw closed form: rdp gives epsilon={checked:.6g} > target; the formula under-noises "
            "here (docs/accounting.md §6.2)",
        )
    replaced = _rdp_noise(q, t, target, delta, [])
    return replaced.model_copy(
        update={
            "accountant": "closed_form",
            "sound": False,
            "reason": f"closed form sigma={sigma:.6g} has rdp epsilon={checked:.6g} > target; replaced by the "
            "rdp-calibrated sigma",
        }
    )


def _closed_form_rate(sigma: float, t: int, target: float, delta: float) -> Calibration:
    grid = rdp.order_grid()
    formula = closed_form.closed_form_sampling_rate(sigma, t, target, delta)
    rate = min(1.0, formula)
    checked = _full_epsilon(grid, None, rate, sigma, t, delta)
    capped = " (the formula allows q > 1; capped at 1)" if formula > 1 else ""
    if checked <= target:
        return Calibration(
            solved_for="sampling_rate", sampling_rate=rate, noise_multiplier=sigma, rounds=t, delta=delta,
            target_epsilon=target, epsilon=checked, accountant="closed_form", accountant_used="closed_form",
            reason=f"closed form{capped}; rdp confirms epsilon={checked:.6g} <= target",
        )
    replaced = _rdp_rate(sigma, t, target, delta, [])
    return replaced.model_copy(
        update={
            "accountant": "closed_form",
            "sound": False,
            "reason": f"closed form sampling_rate={rate:.6g}{capped} has rdp epsilon={checked:.6g} > target; "
            "replaced by the rdp answer",
        }
    )


def _closed_form_rounds(q: float, sigma: float, target: float, delta: float) -> Calibration:
    grid = rdp.order_grid()
    count = min(closed_form.closed_form_rounds(q, sigma, target, delta), ROUNDS_MAX)
    checked = _full_epsilon(grid, None, q, sigma, count, delta) if count else 0.0
    if checked <= target:
        result = _rounds_result(count, q, sigma, delta, target, checked, "closed_form", "closed_form", None)
        note = "closed form" if count else result.reason
        return result.model_copy(update={"reason": f"{note}; rdp confirms epsilon={checked:.6g} <= target"})
    replaced = _rdp_rounds(q, sigma, target, delta, [])
    return replaced.model_copy(
        update={
            "accountant": "closed_form",
            "sound": False,
            "reason": f"closed form rounds={count} has rdp epsilon={checked:.6g} > target; replaced by the rdp answer",
        }
    )


# --------------------------------------------------------------------------- helpers


def _validate_common(**values: object) -> tuple[float, int, float, float]:
    return (
        validate_sampling_rate(values["sampling_rate"]),
        validate_count("rounds", values["rounds"]),
        validate_positive("epsilon", values["epsilon"]),
        validate_delta(values["delta"]),
    )


def _validate_spent(spent: Sequence[Phase], accountant: str) -> list[Phase]:
    phases = validate_phases(spent, "spent")
    if phases and accountant == "closed_form":
        raise InvalidInputError("spent", "closed_form cannot account for spent phases; use rdp or prv")
    return phases


def _spent_rdp(
    phases: list[Phase], delta: float, target: float, grid: rdp.OrderGrid
) -> tuple[np.ndarray | None, float]:
    """RDP curve and epsilon of the spent phases; InfeasibleError if they exceed the target."""
    if not phases:
        return None, 0.0
    curve = rdp.rdp_of_phases([_as_tuple(p) for p in phases], grid)
    spent_eps = rdp.epsilon_from_rdp(grid.orders, curve, delta)[0]
    if spent_eps > target:
        raise InfeasibleError(
            f"the spent phases alone have epsilon {spent_eps:.6g} > target epsilon {target:g}; nothing is left"
        )
    return curve, spent_eps


def _full_epsilon(
    grid: rdp.OrderGrid, spent_curve: np.ndarray | None, q: float, sigma: float, t: int, delta: float
) -> float:
    curve = t * rdp.rdp_curve(q, sigma, grid)
    if spent_curve is not None:
        curve = curve + spent_curve
    return rdp.epsilon_from_rdp(grid.orders, curve, delta)[0]


def _rounds_result(
    count: int,
    q: float,
    sigma: float,
    delta: float,
    target: float,
    achieved: float,
    accountant: str,
    used: str,
    spent_eps: float | None,
) -> Calibration:
    reason = None
    if count == 0:
        reason = "not even one round fits the target; epsilon is that of the spent phases" + (
            "" if spent_eps is not None else " (none, so 0)"
        )
    elif count >= ROUNDS_MAX:
        reason = f"the search stops at rounds={ROUNDS_MAX}; more may fit"
    return Calibration(
        solved_for="rounds",
        sampling_rate=q,
        noise_multiplier=sigma,
        rounds=count,
        delta=delta,
        target_epsilon=target,
        epsilon=achieved,
        accountant=accountant,
        accountant_used=used,
        reason=reason,
        spent_epsilon=spent_eps,
    )


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


def _sigma_guess(q: np.ndarray, t: int, eps: np.ndarray, delta: float) -> np.ndarray:
    """A starting sigma: the small-q RDP slope q^2 (e^{1/sigma^2} - 1) / 2 set equal to
    :func:`_gaussian_rate` and solved for sigma. Only a starting point for the search."""
    rho = _gaussian_rate(t, eps, delta)
    with np.errstate(divide="ignore", over="ignore"):
        guess = 1.0 / np.sqrt(np.log1p(2.0 * rho / (q * q)))
    return np.clip(np.nan_to_num(guess, nan=1.0, posinf=SIGMA_MAX), SIGMA_MIN, SIGMA_MAX)


def _rate_guess(sigma: float, t: int, eps: float, delta: float) -> float:
    """A starting q for :func:`sampling_rate`: the same slope solved for q."""
    rho = float(_gaussian_rate(t, np.array([eps]), delta)[0])
    value = math.sqrt(2.0 * rho / math.expm1(min(1.0 / sigma**2, 700.0)))
    return min(1.0, max(RATE_MIN, value))


def _finite_array(field: str, values: object) -> np.ndarray:
    if isinstance(values, bool):
        raise InvalidInputError(field, "must be an array of numbers, not a boolean")
    try:
        array = np.asarray(values)
    except (TypeError, ValueError):
        raise InvalidInputError(field, "must be an array of numbers") from None
    if array.dtype == bool or not np.issubdtype(array.dtype, np.number):
        raise InvalidInputError(field, "must be an array of numbers")
    array = array.astype(float)
    if not np.all(np.isfinite(array)):
        raise InvalidInputError(field, "every value must be finite")
    return array


def _as_tuple(phase: Phase) -> tuple[float, float, int]:
    return (phase.sampling_rate, phase.noise_multiplier, phase.steps)


def _vector_search(
    g: Callable[[np.ndarray, np.ndarray], np.ndarray], x0: np.ndarray, x_min: float, x_max: float
) -> np.ndarray:
    """The search of :mod:`accounting.search`, run for many independent points at once.

    Bracket (steps that double, away from x0) then the same two-probe regula falsi as
    :func:`search.refine`. Returns hi per point: feasible and evaluated; +inf where even
    x_max is infeasible; x_min where x_min is already feasible.
    """
    m = x0.size
    x0 = np.clip(x0, x_min, x_max)
    g0 = g(np.arange(m), x0)
    lo = np.where(g0 > 0, x0, -np.inf)
    hi = np.where(g0 > 0, np.inf, x0)
    g_lo = np.where(g0 > 0, g0, np.nan)
    g_hi = np.where(g0 > 0, np.nan, g0)
    step = np.maximum(0.25, np.where(np.isfinite(g0), np.abs(g0) * 1.25, 0.25))
    result_inf = np.zeros(m, dtype=bool)
    at_floor = np.zeros(m, dtype=bool)
    # Bracketing: move the missing end until both exist.
    for _ in range(64):
        need_up = np.flatnonzero(~np.isfinite(hi) & ~result_inf)
        need_down = np.flatnonzero(~np.isfinite(lo) & ~at_floor)
        if need_up.size == 0 and need_down.size == 0:
            break
        if need_up.size:
            x = np.minimum(lo[need_up] + step[need_up], x_max)
            gx = g(need_up, x)
            ok = gx <= 0
            hi[need_up[ok]], g_hi[need_up[ok]] = x[ok], gx[ok]
            bad = need_up[~ok]
            lo[bad], g_lo[bad] = x[~ok], gx[~ok]
            result_inf[bad[x[~ok] >= x_max]] = True
            step[need_up] *= 2.0
        if need_down.size:
            x = np.maximum(hi[need_down] - step[need_down], x_min)
            gx = g(need_down, x)
            ok = gx > 0
            lo[need_down[ok]], g_lo[need_down[ok]] = x[ok], gx[ok]
            still = need_down[~ok]
            hi[still], g_hi[still] = x[~ok], gx[~ok]
            at_floor[still[x[~ok] <= x_min]] = True
            step[need_down] *= 2.0
    bisect_next = np.zeros(m, dtype=bool)
    for _ in range(200):
        active = np.flatnonzero(~result_inf & ~at_floor & (hi - lo > _XTOL))
        if active.size == 0:
            break
        a_lo, a_hi, a_glo, a_ghi = lo[active], hi[active], g_lo[active], g_hi[active]
        width = a_hi - a_lo
        usable = np.isfinite(a_glo) & np.isfinite(a_ghi) & (a_glo != a_ghi) & ~bisect_next[active]
        with np.errstate(invalid="ignore", divide="ignore"):
            estimate = np.where(usable, a_lo + a_glo * width / (a_glo - a_ghi), 0.5 * (a_lo + a_hi))
        up = np.minimum(np.maximum(estimate + 0.5 * _XTOL, a_lo + 0.25 * _XTOL), a_hi - 0.25 * _XTOL)
        g_up = g(active, up)
        infeasible = g_up > 0
        lo[active[infeasible]], g_lo[active[infeasible]] = up[infeasible], g_up[infeasible]
        feasible_points = active[~infeasible]
        hi[feasible_points], g_hi[feasible_points] = up[~infeasible], g_up[~infeasible]
        down = np.maximum(up[~infeasible] - _XTOL, lo[feasible_points] + 0.25 * _XTOL)
        probe = (down < hi[feasible_points]) & (hi[feasible_points] - lo[feasible_points] > _XTOL)
        probe_points = feasible_points[probe]
        if probe_points.size:
            g_down = g(probe_points, down[probe])
            above = g_down > 0
            lo[probe_points[above]], g_lo[probe_points[above]] = down[probe][above], g_down[above]
            below = probe_points[~above]
            hi[below], g_hi[below] = down[probe][~above], g_down[~above]
        bisect_next[active] = (hi[active] - lo[active]) > 0.5 * width
    out = hi.copy()
    out[result_inf] = np.inf
    out[at_floor] = x_min
    return out
