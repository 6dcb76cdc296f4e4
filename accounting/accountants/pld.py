"""The ``pld`` accountant: connect-the-dots privacy-loss distributions composed by FFT (docs/accounting.md §13).

Tight (epsilon, delta) of Poisson-subsampled Gaussian histories under add/remove
adjacency (docs/accounting.md §1), as an upper bound: each step's privacy-loss
distribution is replaced by the connect-the-dots dominating pair on a grid of spacing
``h`` (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022), both directions ("remove":
``(mu1, mu0)``, "add": ``(mu0, mu1)``) are composed separately by one real FFT, a power
per phase and one inverse FFT, and the answer is the larger epsilon of the two. Every
approximation is on the pessimistic side or is added to delta (§13.2). Numpy only at
import: the normal tail function is taken from scipy when the first question is asked.

Events it cannot represent (zCDP selections) are answered by rdp for the whole history,
marked ``fallback`` with the reason, as prv does (docs/accounting.md §5.3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from accounting import search
from accounting.accountants.base import RATE_MIN, ROUNDS_MAX, SIGMA_MAX, SIGMA_MIN, Accountant, rounds_result
from accounting.accountants.rdp import RdpAccountant, sigma_guess
from accounting.choices import AccountantName
from accounting.errors import InfeasibleError
from accounting.events import ApproximateDpEvent, PoissonSampledGaussian
from accounting.results import Calibration, EpsilonReport

PhaseTuple = tuple[float, float, int]

_RDP = RdpAccountant()

# docs/accounting.md §13.3: the grid. FFT length (a power of two) and the share of delta
# the truncations may use; what they use is added to delta, never dropped.
FFT_SIZE_MIN = 2**12
FFT_SIZE_MAX = 2**16
# A step's pmf on the fine grid spans at most about 3 windows (its losses are cut to the
# window's top and floored one window below it); more points than this means the window
# failed to contain the step (e.g. full-batch steps of tiny noise, whose losses sit far above
# anything the window was placed for), and the answer falls back to rdp rather than
# allocating an array of that size (docs/accounting.md §13.4).
STEP_POINTS_MAX = 64 * FFT_SIZE_MAX
TAIL_SHARE = 1e-4
# Spacing per unit of the composed loss's standard deviation: the connect-the-dots error
# falls as h^2, and 1/250 of a standard deviation keeps calibrated sigma within 0.1% of
# a fine-grid reference on the bench's cases (docs/benchmarks.md §Issue 26).
STD_STEPS = 250.0
# Calibrations stop when the bracket on sigma (or q) is within 0.1%: the answer is the
# bracket's evaluated feasible end, at most 0.1% above the exact PLD root.
XTOL = math.log1p(1e-3)
# A typical |d log epsilon / d log sigma| near a calibration's answer (2-5 on the bench's
# cases): search.bracket's first step is |g(guess)| / BRACKET_SLOPE.
BRACKET_SLOPE = 3.0


def _sf(x: np.ndarray) -> np.ndarray:
    """The standard normal survival function (scipy's ndtr, imported on first use)."""
    from scipy.special import ndtr

    return ndtr(-x)


# --------------------------------------------------------------------------- one step, one direction


def _threshold(eps: np.ndarray, q: float, sigma: float, direction: str) -> np.ndarray:
    """x at which the loss equals ``eps``: remove: L(x) = log(1-q+q e^{(2x-1)/2s^2}) rises in x;
    add: L(x) = -log(...) falls in x. nan where no x reaches ``eps``."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if direction == "remove":
            inner = np.expm1(eps) + q  # e^eps - (1-q), without cancellation
        else:
            inner = np.expm1(-eps) + q
        return np.where(inner > 0, sigma**2 * np.log(np.where(inner > 0, inner, 1.0) / q) + 0.5, np.nan)


def _tails(eps: np.ndarray, q: float, sigma: float, direction: str) -> tuple[np.ndarray, np.ndarray]:
    """P(L > eps) under the direction's first distribution P, and Q(L > eps) (docs/accounting.md §13.1)."""
    x = _threshold(eps, q, sigma, direction)
    below = np.isnan(x)  # remove: eps below log(1-q), every x has L > eps; add: eps above -log(1-q), none has
    x = np.where(below, 0.0, x)
    if direction == "remove":  # P = mu1 = (1-q) N(0) + q N(1), Q = mu0 = N(0); L > eps iff x > threshold
        qq = _sf(x / sigma)
        p = (1 - q) * qq + q * _sf((x - 1) / sigma)
        return np.where(below, 1.0, p), np.where(below, 1.0, qq)
    # add: P = mu0, Q = mu1; L > eps iff x < threshold
    p = _sf(-x / sigma)
    qq = (1 - q) * p + q * _sf((1 - x) / sigma)
    return np.where(below, 0.0, p), np.where(below, 0.0, qq)


def single_delta(eps: float, q: float, sigma: float, direction: str) -> float:
    """Hockey-stick divergence of one step: P(L > eps) - e^eps Q(L > eps)."""
    p, qq = _tails(np.array([eps]), q, sigma, direction)
    return max(float(p[0] - math.exp(eps) * qq[0]), 0.0)


class _StepPmf:
    """The connect-the-dots pmf of one step on grid points ``h * (lo .. lo + len(mass) - 1)``,
    plus ``inf_mass`` at +infinity (docs/accounting.md §13.1)."""

    def __init__(self, q: float, sigma: float, direction: str, h: float, lo: int, hi: int) -> None:
        grid = h * np.arange(lo, hi + 1, dtype=float)
        p_tail, q_tail = _tails(grid, q, sigma, direction)
        # cell i = (grid_i, grid_{i+1}]: its P and Q mass
        p_cell = np.maximum(p_tail[:-1] - p_tail[1:], 0.0)
        q_cell = np.maximum(q_tail[:-1] - q_tail[1:], 0.0)
        e_lo = np.exp(grid[:-1])
        e_hi = np.exp(grid[1:])
        # a loss l in the cell splits into (e^{b-l} - 1)/(e^h - 1) at a and (1 - e^{a-l})/(1 - e^{-h}) at b:
        # E_P[e^{-L}; cell] = Q(cell), so the cell's shares are linear in (P, Q) of the cell
        to_lower = np.maximum((e_hi * q_cell - p_cell) / math.expm1(h), 0.0)
        to_upper = np.maximum((p_cell - e_lo * q_cell) / -math.expm1(-h), 0.0)
        mass = np.zeros(hi - lo + 1)
        mass[:-1] += to_lower
        mass[1:] += to_upper
        # above the top point: e^{top} Q(L > top) at top, the rest P(L > top) - e^{top} Q(L > top) at +inf
        top_q = q_tail[-1] * e_hi[-1] if len(e_hi) else q_tail[-1] * math.exp(grid[-1])
        self.inf_mass = max(float(p_tail[-1] - top_q), 0.0)
        mass[-1] += min(top_q, float(p_tail[-1]))
        # below the bottom point: rounded up to it (pessimistic); the P mass left over
        mass[0] += max(1.0 - float(p_tail[0]), 0.0)
        self.mass = mass
        self.lo = lo
        self.h = h


# --------------------------------------------------------------------------- composition


class Composed:
    """One direction's composition of phases: the finite part on a window of the FFT grid
    and the error terms added to delta (docs/accounting.md §13.2)."""

    def __init__(self, losses: np.ndarray, pmf: np.ndarray, inf_mass: float, error: float) -> None:
        self.losses = losses
        self.pmf = pmf
        self.inf_mass = inf_mass
        self.error = error

    def delta(self, eps: float) -> float:
        """delta(eps) of the discretised composition plus its error terms (an upper bound)."""
        above = self.losses > eps
        tail = float(np.sum(self.pmf[above] * -np.expm1(eps - self.losses[above])))
        return min(1.0, self.inf_mass + tail + self.error)

    def epsilon(self, delta: float) -> float:
        """Smallest eps >= 0 with delta(eps) <= delta; inf when even the error terms exceed it."""
        budget = delta - self.inf_mass - self.error
        if budget <= 0:
            return math.inf
        keep = self.losses > 0
        losses, pmf = self.losses[keep], self.pmf[keep]
        if pmf.size == 0:
            return 0.0
        # from the top: A_k = sum_{j>=k} p_j, B_k = sum_{j>=k} p_j e^{-l_j} (in logs: e^{-l} overflows
        # at large losses); delta(eps) = A_k - e^eps B_k on (l_{k-1}, l_k]
        a = np.cumsum(pmf[::-1])[::-1]
        with np.errstate(divide="ignore"):
            log_b = np.logaddexp.accumulate((np.log(pmf) - losses)[::-1])[::-1]
        # delta at each grid loss l_k counts the points above it: A_{k+1} - e^{l_k} B_{k+1} (<= A_{k+1})
        a_next = np.append(a[1:], 0.0)
        log_b_next = np.append(log_b[1:], -np.inf)
        at_points = a_next - np.exp(losses + log_b_next)
        k = int(np.nonzero(at_points <= budget)[0][0])  # the last point fits (nothing above it)
        if k == 0 and float(a[0] - math.exp(log_b[0])) <= budget:  # delta(0)
            return 0.0
        if a[k] <= budget or not math.isfinite(log_b[k]):
            return float(losses[k])
        # on (l_{k-1}, l_k] the points from k up count: A_k - e^eps B_k = budget
        eps = math.log(a[k] - budget) - float(log_b[k])
        low = float(losses[k - 1]) if k > 0 else 0.0
        return float(min(max(eps, low, 0.0), losses[k]))


def _log_mgf(losses: np.ndarray, mass: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """log E[e^{lambda L}] of a (sub-)pmf for each lambda (each scaled by its largest exponent)."""
    shift = np.where(lambdas > 0, lambdas * losses[-1], lambdas * losses[0])
    terms = np.exp(lambdas[:, None] * losses[None, :] - shift[:, None])
    with np.errstate(divide="ignore"):
        return shift + np.log(terms @ mass)


def _tail_quantiles(log_mgf: np.ndarray, lambdas: np.ndarray, log_tail: float) -> float:
    """The smallest bound u that the Chernoff bound gives P(S > u) <= e^{log_tail} for (lambdas > 0)."""
    return float(np.min((log_mgf - log_tail) / lambdas))


_LAMBDAS = np.geomspace(1e-2, 1e3, 24)


def compose(phases: Sequence[PhaseTuple], delta: float, direction: str, fft_size: int | None = None) -> Composed:
    """The composition of ``phases`` in one direction (docs/accounting.md §13.2-§13.3)."""
    total_steps = sum(t for _, _, t in phases)
    # a coarse pass places the window: Chernoff quantiles of the composition, from each step's coarse pmf
    tops, bottoms = [], []
    var_total = 0.0
    log_mgf_up = np.zeros(_LAMBDAS.size)
    log_mgf_down = np.zeros(_LAMBDAS.size)
    for q, sigma, t in phases:
        top = _top_loss(q, sigma, direction, delta * TAIL_SHARE / (4 * total_steps))
        bottom = _bottom_loss(q, sigma, direction, top, delta * TAIL_SHARE / total_steps)
        coarse_h = (top - bottom) / 600
        pmf = _StepPmf(q, sigma, direction, coarse_h, math.floor(bottom / coarse_h), math.ceil(top / coarse_h))
        losses = coarse_h * (pmf.lo + np.arange(pmf.mass.size))
        mean = float(np.sum(pmf.mass * losses))
        var_total += t * float(np.sum(pmf.mass * (losses - mean) ** 2))
        log_mgf_up += t * _log_mgf(losses, pmf.mass, _LAMBDAS)
        log_mgf_down += t * _log_mgf(losses, pmf.mass, -_LAMBDAS)
        tops.append(top)
        bottoms.append(bottom)
    std = math.sqrt(max(var_total, 1e-300))
    log_tail = math.log(delta * TAIL_SHARE / 4)
    # a step's loss above the window goes to +inf (counted in full in delta), so the window
    # need not reach the steps' own tops
    high = _tail_quantiles(log_mgf_up, _LAMBDAS, log_tail)
    tops = [min(top, high) for top in tops]
    low = -_tail_quantiles(log_mgf_down, _LAMBDAS, log_tail)
    low = min(low, high - 1e-9)
    # the spacing resolves the composition (STD_STEPS per standard deviation) and each step: the
    # connect-the-dots error is at most about h^2 / 8 of loss per step, kept below 1e-4 of the top
    step_h = math.sqrt(8e-4 * max(high, 1e-2) / total_steps)
    points = max(STD_STEPS * (high - low) / std, (high - low) / step_h, 1.0)
    n = fft_size or int(min(FFT_SIZE_MAX, max(FFT_SIZE_MIN, 2 ** math.ceil(math.log2(points)))))
    h = (high - low) / (n - 1)
    window_lo = math.floor(low / h)
    window_hi = window_lo + n - 1
    # a step's loss below this is rounded up to it (pessimistic): nothing below the window matters
    floor_loss = min(low, 0.0) - (high - low)
    spectrum = np.ones(n // 2 + 1, dtype=complex)
    fft_error = _FftErrorBound(n)
    offset = 0
    survive = 0.0  # log P(no step at +inf)
    # the exact tail bound above the window, on the fine pmfs at the lambdas near the coarse optimum
    best = float(_LAMBDAS[np.argmin(log_mgf_up - _LAMBDAS * (window_hi * h))])
    lambdas = best * np.array([0.8, 1.0])
    fine_up = np.zeros(lambdas.size)
    for (q, sigma, t), top, bottom in zip(phases, tops, bottoms):
        lo_i, hi_i = math.floor(max(bottom, floor_loss) / h), math.ceil(top / h)
        hi_i = max(hi_i, lo_i + 1)
        if hi_i - lo_i + 1 > STEP_POINTS_MAX:
            raise ValueError(f"a step's loss pmf would need {hi_i - lo_i + 1:.3g} grid points")
        pmf = _StepPmf(q, sigma, direction, h, lo_i, hi_i)
        survive += t * math.log1p(-pmf.inf_mass) if pmf.inf_mass < 1 else -math.inf
        placed = np.bincount(np.arange(pmf.mass.size) % n, weights=pmf.mass, minlength=n)
        fft_error.add_phase(math.sqrt(float(np.sum(np.square(placed)))), t)  # no BLAS threads
        spectrum *= np.fft.rfft(placed) ** t
        offset += t * lo_i
        fine_up += t * _log_mgf(h * (lo_i + np.arange(pmf.mass.size)), pmf.mass, lambdas)
    composed = np.fft.irfft(spectrum, n)
    # position j holds every sum index s with s - offset = j (mod n); the window reads each once
    indices = np.arange(window_lo, window_hi + 1)
    values = composed[(indices - offset) % n]
    noise = float(np.sum(-values[values < 0]))
    values = np.maximum(values, 0.0)
    # the exact composition's mass above the window wrapped to lower losses: its Chernoff bound
    # is counted in full in delta (mass below the window wraps upwards: pessimistic)
    above = min(math.exp(min(float(np.min(fine_up - lambdas * (window_hi * h))), 0.0)), 1.0)
    inf_mass = -math.expm1(survive)
    # floating-point error of the FFT: a proven bound on the l1 error of the values read
    # (§13.2, _FftErrorBound); the negative values are pure error, so their sum is below it
    return Composed(h * indices, values, inf_mass, above + max(fft_error.l1(), 2 * noise))


class _FftErrorBound:
    """A bound on the l1 norm of the floating-point error of ``irfft(prod_k rfft(x_k) ** t_k)``
    against the exact circular convolution (docs/accounting.md §13.2, "FFT rounding").

    With unit roundoff ``u`` and twiddle factors accurate to ``mu``, a length-n FFT computed
    in ``log2 n`` stages has ``||fl(F x) - F x||_2 <= c_n ||F x||_2``,
    ``c_n = L eta / (1 - L eta)``, ``L = log2 n``, ``eta = mu + gamma_4 (sqrt 2 + mu)``
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Thm 24.2); here
    ``mu = 4 u`` (pocketfft's twiddles are accurate to about ``u``) and ``L = log2 n + 1``
    (the real transform's post-processing pass is one more butterfly stage; pocketfft's
    radix-4 passes round each element no more often than the two radix-2 stages they replace). Each step spectrum has
    ``||F x_k||_2 = sqrt(n) ||x_k||_2`` and entries of modulus <= 1 (x_k is a sub-pmf), so
    raising it to ``t_k`` adds at most ``t_k`` times its error (the derivative of ``s^t`` on
    the unit disc) plus the power's own rounding, ``(t_k (pi + 1) + 4) u`` of an entry of
    modulus <= 1 (``exp(t log s)``: ``t |log s| |s|^t <= 1/e``, ``t |arg s| <= pi t``); the
    products of the phases' spectra add ``4u`` each. The inverse transform divides the
    spectrum's l2 error by ``sqrt(n)`` and adds ``c_n`` of its output (l2 <= l1 <= 1), and
    ``||e||_1 <= sqrt(n) ||e||_2`` converts to the l1 norm, which bounds the error of every
    ``delta(eps)`` (each value enters it with a weight in [0, 1]).
    """

    U = 2.0**-53

    def __init__(self, n: int) -> None:
        levels = math.log2(n) + 1
        gamma4 = 4 * self.U / (1 - 4 * self.U)
        mu = 4 * self.U
        eta = mu + gamma4 * (math.sqrt(2) + mu)
        self.n = n
        self.c_n = levels * eta / (1 - levels * eta)
        self.spectrum_l2 = 0.0  # bound on ||computed - exact||_2 of the composed spectrum / sqrt(n)
        self.phases = 0

    def add_phase(self, l2: float, steps: int) -> None:
        """Account for one phase: its pmf's l2 norm on the grid and its step count."""
        self.spectrum_l2 += steps * self.c_n * l2 + (steps * (math.pi + 1) + 4) * self.U + 4 * self.U
        self.phases += 1

    def l1(self) -> float:
        return math.sqrt(self.n) * (self.spectrum_l2 + self.c_n)


def _top_loss(q: float, sigma: float, direction: str, budget: float) -> float:
    """A loss above which one step's delta is at most ``budget`` (that part goes to +inf)."""
    cap = -math.log1p(-q) if (direction == "add" and q < 1) else math.inf
    candidates = np.geomspace(1e-4, 700.0, 137)
    candidates = candidates[candidates < cap]
    if candidates.size == 0:
        return cap
    with np.errstate(over="ignore", invalid="ignore"):
        p, qq = _tails(candidates, q, sigma, direction)
        deltas = np.where(qq > 0, p - np.exp(candidates) * qq, p)
    fits = np.nonzero(deltas <= budget)[0]
    if fits.size == 0:
        return cap if math.isfinite(cap) else float(candidates[-1])
    return float(candidates[fits[0]])


def _bottom_loss(q: float, sigma: float, direction: str, top: float, mass: float) -> float:
    """A loss below which one step's P mass is below ``mass`` (rounded up to it: pessimistic, §13.1)."""
    floor = math.log1p(-q) if (direction == "remove" and q < 1) else -math.inf
    z = max(math.sqrt(2 * math.log(1 / max(mass, 1e-300))), 4.0)  # Phi(-z) <= mass
    if direction == "remove":  # L rises with x ~ mu1: low x
        x = -z * sigma
        value = math.log((1 - q) + q * math.exp((2 * x - 1) / (2 * sigma**2)))
    else:  # add: L = -log(...) falls with x ~ mu0: high x
        x = z * sigma
        arg = (2 * x - 1) / (2 * sigma**2)
        value = -(math.log(q) + arg + math.log1p((1 - q) / q * math.exp(-arg)))
    value = max(value, floor) if math.isfinite(floor) else value
    return min(value, top - 1e-9)


def epsilon_of_phases(phases: Sequence[PhaseTuple], delta: float) -> float:
    """Epsilon of the composed phases at ``delta``: the larger of the two directions (§13)."""
    return _epsilon_and_error(phases, delta)[0]


def _epsilon_and_error(phases: Sequence[PhaseTuple], delta: float) -> tuple[float, float]:
    """Epsilon and the larger direction's error terms (added to delta), as a share of delta."""
    composed = [compose(phases, delta, direction) for direction in ("remove", "add")]
    return max(c.epsilon(delta) for c in composed), max(c.error for c in composed) / delta


# Where the error terms take more than this share of delta (tiny delta, many steps of a tiny
# rate: the FFT rounding bound grows with the steps), rdp's bound is computed too and the
# smaller of the two sound bounds is the answer (§13.2).
ERROR_SHARE_CHECK = 0.05


def sound_epsilon(phases: Sequence[PhaseTuple], delta: float) -> tuple[float, str | None]:
    """The PLD epsilon, or rdp's epsilon and the reason: where the discretisation fails
    numerically (noise multipliers near the search floor put single losses beyond e^700,
    §13.4), or where the error terms added to delta leave rdp's bound the lower one (§13.2)."""
    events: list[ApproximateDpEvent] = [
        PoissonSampledGaussian(sampling_rate=q, noise_multiplier=z, steps=t) for q, z, t in phases
    ]
    try:
        with np.errstate(all="ignore"):
            value, share = _epsilon_and_error(phases, delta)
        if value >= 0 and share <= ERROR_SHARE_CHECK:  # inf is a sound answer; nan is not an answer
            return value, None
        if value >= 0:
            rdp = _RDP.epsilon(events, delta).epsilon
            if rdp < value:
                return rdp, (
                    f"pld's error terms take {min(share, 1.0):.0%} of delta (FFT rounding bound and tails, "
                    f"docs/accounting.md §13.2), leaving rdp's bound the lower one; answered by rdp"
                )
            return value, None
        failure = f"epsilon {value}"
    except (ArithmeticError, ValueError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    return _RDP.epsilon(events, delta).epsilon, f"pld failed numerically ({failure}); fell back to rdp"


# --------------------------------------------------------------------------- the accountant


class PldAccountant(Accountant):
    name: ClassVar[AccountantName] = "pld"
    verified_by: ClassVar[AccountantName] = "pld"
    per_round: ClassVar[AccountantName] = _RDP.name
    tabulated_by: ClassVar[AccountantName] = _RDP.name
    # a history with an event the PLD does not represent (zCDP) is answered by rdp, marked (§13.4)
    fallback: ClassVar[AccountantName | None] = _RDP.name
    supports: ClassVar[tuple[type[ApproximateDpEvent], ...]] = (ApproximateDpEvent,)

    def epsilon(
        self, events: list[ApproximateDpEvent], delta: float, *, time_limit_s: float | None = None
    ) -> EpsilonReport:
        """The connect-the-dots PLD upper bound (docs/accounting.md §13), or rdp's answer marked ``fallback``."""
        reason = _unrepresented(events)
        if reason:
            return _RDP.epsilon(events, delta).model_copy(
                update={"accountant": self.name, "fallback": True, "reason": reason}
            )
        value, failed = sound_epsilon(_phases(events), delta)
        if failed:
            return _RDP.epsilon(events, delta).model_copy(
                update={"accountant": self.name, "fallback": True, "reason": failed}
            )
        return EpsilonReport(epsilon=value, delta=delta, accountant=self.name, accountant_used=self.name)

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
        """docs/accounting.md §13.5: a proven bracket on log sigma (§7.1's search) on the PLD epsilon."""
        q, t = sampling_rate, rounds
        reason = _unrepresented(spent)
        if reason:
            return _fell_back(_RDP.noise_multiplier(q, t, target, delta, spent), self.name, reason)
        history = _phases(spent)
        spent_eps = _spent_epsilon(history, delta, target)
        answers: dict[float, tuple[float, str | None]] = {}  # sigma -> sound_epsilon, each computed once

        def answer(sigma: float) -> tuple[float, str | None]:
            if sigma not in answers:
                answers[sigma] = sound_epsilon([*history, (q, sigma, t)], delta)
            return answers[sigma]

        def g(x: float) -> float:
            return search.log_ratio(answer(math.exp(x))[0], target)

        remaining = max(target - (spent_eps or 0.0), 0.05 * target)
        guess = float(sigma_guess(np.array([q]), t, np.array([remaining]), delta)[0])
        try:
            # log epsilon falls 2-5 times as fast as log sigma rises near the answer: the first
            # step (|g(guess)| / slope) then lands next to the root, not 2-3x beyond it
            start = search.bracket(
                g, math.log(guess), math.log(SIGMA_MIN), math.log(SIGMA_MAX), slope=BRACKET_SLOPE
            )
            found = search.refine(g, start, XTOL)
        except search.NoFeasiblePoint:
            raise InfeasibleError(
                f"no noise_multiplier up to {SIGMA_MAX:g} meets epsilon={target:g} at sampling_rate={q:g}, "
                f"rounds={t}, delta={delta:g}"
            ) from None
        sigma = math.exp(found.hi)
        achieved, failed = answer(sigma)
        return Calibration(
            solved_for="noise_multiplier",
            sampling_rate=q,
            noise_multiplier=sigma,
            rounds=t,
            delta=delta,
            target_epsilon=target,
            epsilon=achieved,
            accountant=self.name,
            accountant_used=_RDP.name if failed else self.name,
            fallback=failed is not None,
            reason=failed
            or (f"the target is met already at the search floor noise_multiplier={SIGMA_MIN:g}" if found.at_floor else None),
            spent_epsilon=spent_eps,
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
        """docs/accounting.md §7.3 on the PLD epsilon: q = 1 if it fits, else a bracket on -log q."""
        sigma, t = noise_multiplier, rounds
        reason = _unrepresented(spent)
        if reason:
            return _fell_back(_RDP.sampling_rate(sigma, t, target, delta, spent), self.name, reason)
        history = _phases(spent)
        spent_eps = _spent_epsilon(history, delta, target)

        def eps_at(rate: float) -> float:
            return sound_epsilon([*history, (rate, sigma, t)], delta)[0]

        rate = 1.0
        if eps_at(1.0) > target:
            # rdp's answer is feasible here too (PLD is tighter up to its error): start from it
            try:
                start = _RDP.sampling_rate(sigma, t, target, delta, []).sampling_rate
            except InfeasibleError:
                start = RATE_MIN

            def g(x: float) -> float:  # x = -log q
                return search.log_ratio(eps_at(min(1.0, math.exp(-x))), target)

            try:
                found = search.refine(g, search.bracket(g, -math.log(start), 0.0, -math.log(RATE_MIN)), XTOL)
            except search.NoFeasiblePoint:
                raise InfeasibleError(
                    f"even sampling_rate={RATE_MIN:g} exceeds epsilon={target:g} at noise_multiplier={sigma:g}, "
                    f"rounds={t}, delta={delta:g}"
                ) from None
            rate = min(1.0, math.exp(-found.hi))
        achieved, failed = sound_epsilon([*history, (rate, sigma, t)], delta)
        return Calibration(
            solved_for="sampling_rate",
            sampling_rate=rate,
            noise_multiplier=sigma,
            rounds=t,
            delta=delta,
            target_epsilon=target,
            epsilon=achieved,
            accountant=self.name,
            accountant_used=_RDP.name if failed else self.name,
            fallback=failed is not None,
            reason=failed or ("every client in every round (sampling_rate=1) meets the target" if rate == 1.0 else None),
            spent_epsilon=spent_eps,
        )

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
        """docs/accounting.md §7.4 on the PLD epsilon: an exponential, then a binary integer search."""
        q, sigma = sampling_rate, noise_multiplier
        reason = _unrepresented(spent)
        if reason:
            return _fell_back(_RDP.rounds(q, sigma, target, delta, spent), self.name, reason)
        history = _phases(spent)
        spent_eps = _spent_epsilon(history, delta, target)

        def eps_at(count: int) -> float:
            return sound_epsilon([*history, (q, sigma, count)], delta)[0]

        count = search.integer_search(lambda n: eps_at(n) <= target, ROUNDS_MAX)
        failed = None
        if count:
            achieved, failed = sound_epsilon([*history, (q, sigma, count)], delta)
        else:
            achieved = spent_eps if spent_eps is not None else 0.0
        result = rounds_result(
            count, q, sigma, delta, target, achieved, self.name, _RDP.name if failed else self.name, spent_eps
        )
        return result.model_copy(update={"fallback": True, "reason": failed}) if failed else result


def _unrepresented(events: Sequence[ApproximateDpEvent]) -> str | None:
    """Why the PLD cannot account for these events (the kinds it does not represent), or None."""
    kinds = sorted({event.kind for event in events if not isinstance(event, PoissonSampledGaussian)})
    if not kinds:
        return None
    return f"pld represents Poisson-subsampled Gaussian events only, not {', '.join(kinds)}; fell back to rdp"


def _fell_back(answer: Calibration, name: AccountantName, reason: str) -> Calibration:
    return answer.model_copy(update={"accountant": name, "fallback": True, "reason": reason})


def _phases(events: Sequence[ApproximateDpEvent]) -> list[PhaseTuple]:
    out = []
    for event in events:
        assert isinstance(event, PoissonSampledGaussian)  # _unrepresented was checked first
        out.append((event.sampling_rate, event.noise_multiplier, event.steps))
    return out


def _spent_epsilon(history: list[PhaseTuple], delta: float, target: float) -> float | None:
    """The PLD epsilon of the spent phases alone; InfeasibleError when they exceed the target (§7.5)."""
    if not history:
        return None
    value = sound_epsilon(history, delta)[0]
    if value > target:
        raise InfeasibleError(
            f"the spent events alone have epsilon {value:.6g} > target epsilon {target:g}; nothing is left"
        )
    return value
