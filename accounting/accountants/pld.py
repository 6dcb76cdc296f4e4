"""The ``pld`` accountant: connect-the-dots privacy-loss distributions composed by FFT (docs/accounting.md §13).

Tight (epsilon, delta) of Poisson-subsampled Gaussian histories under add/remove
adjacency (docs/accounting.md §1), as an upper bound: each step's privacy-loss
distribution is replaced by the connect-the-dots dominating pair on a grid of spacing
``h`` (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022), both directions ("remove":
``(mu1, mu0)``, "add": ``(mu0, mu1)``) are composed separately by one real FFT, a power
per phase and one inverse FFT, and the answer is the larger epsilon of the two. Every
approximation is on the pessimistic side or is added to delta (§13.2). Numpy only: the
normal tails are :mod:`accounting.normal`'s (Cephes' ndtr, as scipy computes it, §13.9).

A Poisson-subsampled Skellam event is composed as the Gaussian phase that dominates it,
its tail mass added to delta (:meth:`PoissonSampledSkellam.dominating_gaussian`,
docs/accounting.md §11.7). Events it cannot represent (zCDP selections) are answered by
rdp for the whole history, marked ``fallback`` with the reason, as prv does
(docs/accounting.md §5.3).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from typing import ClassVar

import numpy as np

from accounting import search
from accounting.accountants.base import (
    RATE_MIN,
    ROUNDS_MAX,
    SIGMA_MAX,
    SIGMA_MIN,
    Accountant,
    Answered,
    History,
    PhaseTuple,
    no_noise_meets,
    noise_result,
    rate_result,
    rounds_result,
)
from accounting.accountants.rdp import RdpAccountant, rounds_guess, sigma_guess
from accounting.choices import AccountantName
from accounting.errors import InfeasibleError, log_fallback_detail
from accounting.events import ApproximateDpEvent, PoissonSampledGaussian, PoissonSampledSkellam
from accounting.normal import log_ndtr, survival
from accounting.results import Calibration, EpsilonReport

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
# A phase's step count is composed as a float64 and raised by int64 binary powering: from 2^53
# steps on, neither holds it exactly (past 2^63 the int64 is negative, and halving it never
# ends), and the FFT rounding bound alone exceeds any delta long before, so rdp answers (§13.4).
STEPS_MAX = 2**53
TAIL_SHARE = 1e-4
# Spacing per unit of the composed loss's standard deviation: the connect-the-dots error
# falls as h^2, and 1/250 of a standard deviation keeps calibrated sigma within 0.1% of
# a fine-grid reference on the bench's cases (docs/benchmarks.md §Issue 26).
STD_STEPS = 250.0
# The noise multiplier is a point of the lattice e^{k XTOL} (docs/accounting.md §7.8, §13.5):
# the least one evaluated feasible, its lower neighbour evaluated infeasible, so at most 0.1%
# above the exact PLD root; sampling rates stop when the bracket on q is within 0.1%.
XTOL = math.log1p(1e-3)
# A typical |d log epsilon / d log sigma| near a calibration's answer (2-5 on the bench's
# cases): the lattice search's first step (and search.bracket's for q) is |g(guess)| / BRACKET_SLOPE.
BRACKET_SLOPE = 3.0


def _sf(x: np.ndarray) -> np.ndarray:
    """The standard normal survival function: Cephes' ndtr at -x in numpy
    (:func:`accounting.normal.survival`; scipy's import cost ``gdpfed account`` 0.12 s, §13.9)."""
    return survival(x)


# --------------------------------------------------------------------------- one step, one direction


def _threshold(eps: np.ndarray, q: float | np.ndarray, sigma: float | np.ndarray, direction: str) -> np.ndarray:
    """x at which the loss equals ``eps``: remove: L(x) = log(1-q+q e^{(2x-1)/2s^2}) rises in x;
    add: L(x) = -log(...) falls in x. nan where no x reaches ``eps``. Computed in place, in
    the order ``sigma^2 log(inner / q) + 0.5``: the same operations on every value x is
    returned at (the others are set to nan)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # e^eps - (1-q) (remove) or e^-eps - (1-q) (add), without cancellation
        inner = np.asarray(np.expm1(eps if direction == "remove" else -eps))
        inner = _into(np.add, inner, q)
        outside = ~(inner > 0)
        x = _into(np.divide, inner, q)
        np.log(x, out=x)
        x = _into(np.multiply, x, np.square(sigma))
        x += 0.5
        np.copyto(x, np.nan, where=outside)
        return x


def _into(ufunc: np.ufunc, a: np.ndarray, b: float | np.ndarray) -> np.ndarray:
    """``ufunc(a, b)``, written over ``a`` (a temporary of the caller's) where it has the result's shape."""
    try:
        return ufunc(a, b, out=a)
    except ValueError:  # ``b`` broadcasts ``a`` to a larger shape: a new array
        return ufunc(a, b)


def _tails(
    eps: np.ndarray, q: float | np.ndarray, sigma: float | np.ndarray, direction: str
) -> tuple[np.ndarray, np.ndarray]:
    """P(L > eps) under the direction's first distribution P, and Q(L > eps) (docs/accounting.md §13.1)."""
    x = _threshold(eps, q, sigma, direction)
    below = np.isnan(x)  # remove: eps below log(1-q), every x has L > eps; add: eps above -log(1-q), none has
    np.copyto(x, 0.0, where=below)
    if direction == "remove":  # P = mu1 = (1-q) N(0) + q N(1), Q = mu0 = N(0); L > eps iff x > threshold
        first = _sf(x / sigma)  # Q's tail
        second = _sf((x - 1) / sigma)
        fill = 1.0
    else:  # add: P = mu0, Q = mu1; L > eps iff x < threshold
        first = _sf(-x / sigma)  # P's tail
        second = _sf((1 - x) / sigma)
        fill = 0.0
    # the mixture's tail (1-q) first + q second, computed in that order
    mixed = _into(np.multiply, second, q)
    mixed = np.add((1 - q) * first, mixed, out=mixed if mixed.shape == first.shape else None)
    np.copyto(mixed, fill, where=below)
    np.copyto(first, fill, where=below)
    return (mixed, first) if direction == "remove" else (first, mixed)


def single_delta(eps: float, q: float, sigma: float, direction: str) -> float:
    """Hockey-stick divergence of one step: P(L > eps) - e^eps Q(L > eps)."""
    p, qq = _tails(np.array([eps]), q, sigma, direction)
    return max(float(p[0] - math.exp(eps) * qq[0]), 0.0)


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
        # the positive losses: a suffix of the grid (its losses rise with the index, §13.3), read
        # as a view; the mask where they are not one (never on a grid of finite spacing)
        first = int(np.searchsorted(self.losses, 0.0, side="right"))
        if first == self.losses.size or (self.losses[first] > 0 and (first == 0 or self.losses[first - 1] <= 0)):
            losses, pmf = self.losses[first:], self.pmf[first:]
        else:
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
        # delta at l_k <= A_{k+1} (e^x >= 0): the first k it fits at is at or below the first
        # k0 with A_{k0+1} <= budget, so the points above k0 need no exp (the last point has
        # A = 0 and fits: nothing is above it)
        k0 = int(np.argmax(a_next <= budget))
        head = losses[: k0 + 1] + log_b_next[: k0 + 1]
        np.exp(head, out=head)
        at_points = np.subtract(a_next[: k0 + 1], head, out=head)
        fitting = np.nonzero(at_points <= budget)[0]
        if fitting.size == 0:
            # a NaN budget or pmf (a composition past the float range, e.g. 10^12 steps) fits
            # nowhere: a numerical failure, which sound_epsilon answers with rdp (§13.4)
            raise FloatingPointError("the composed privacy-loss distribution is not a number")
        k = int(fitting[0])
        if k == 0 and float(a[0] - math.exp(log_b[0])) <= budget:  # delta(0)
            return 0.0
        if a[k] <= budget or not math.isfinite(log_b[k]):
            return float(losses[k])
        # on (l_{k-1}, l_k] the points from k up count: A_k - e^eps B_k = budget
        eps = math.log(a[k] - budget) - float(log_b[k])
        low = float(losses[k - 1]) if k > 0 else 0.0
        return float(min(max(eps, low, 0.0), losses[k]))


_LAMBDAS = np.geomspace(1e-2, 1e3, 24)


def compose(phases: Sequence[PhaseTuple], delta: float, direction: str) -> Composed:
    """The composition of ``phases`` in one direction (docs/accounting.md §13.2-§13.3): the
    one-history case of :func:`compose_many`."""
    return compose_many([phases], delta, direction)[0]


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
    modulus <= 1 (``exp(t log s)``: ``t |log s| |s|^t <= 1/e``, ``t |arg s| <= pi t``; the
    binary powering of :func:`_integer_powers` stays within it, ``(t_k - 1) sqrt 5 u``); the
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


def epsilon_of_phases(phases: Sequence[PhaseTuple], delta: float) -> float:
    """Epsilon of the composed phases at ``delta``: the larger of the two directions (§13)."""
    return _epsilon_and_error(phases, delta)[0]


def _epsilon_and_error(phases: Sequence[PhaseTuple], delta: float) -> tuple[float, float]:
    """Epsilon and the larger direction's error terms (added to delta), as a share of delta."""
    return _epsilons_and_errors([phases], delta)[0]


def _epsilons_and_errors(histories: Sequence[Sequence[PhaseTuple]], delta: float) -> list[tuple[float, float]]:
    """:func:`_epsilon_and_error` of every history: those of full participation in closed form
    (:func:`gaussian_epsilon`, no error terms), the others composed together (:func:`compose_many`)."""
    out: list[tuple[float, float]] = [
        (0.0, 0.0) if _never_told_apart(h, delta) else
        (gaussian_epsilon(_gaussian_mu(h), delta), 0.0) if _full(h) else (math.nan, 0.0)
        for h in histories
    ]
    composed = [i for i, h in enumerate(histories) if not _full(h) and not _never_told_apart(h, delta)]
    if composed:
        part = [histories[i] for i in composed]
        directions = [compose_many(part, delta, direction) for direction in ("remove", "add")]
        for i, (remove, add) in zip(composed, zip(*directions, strict=True), strict=True):
            out[i] = (max(remove.epsilon(delta), add.epsilon(delta)), max(remove.error, add.error) / delta)
    return out


# --------------------------------------------------------------------------- full participation


def _never_told_apart(phases: Sequence[PhaseTuple], delta: float) -> bool:
    """``delta`` is at least the chance that the unit is sampled in some step,
    ``1 - prod_k (1 - q_k)^T_k``: the two neighbouring outputs coincide unless it is (a coupling),
    so their total variation, the hockey-stick divergence at eps = 0, is at most that chance and
    epsilon is exactly 0 at any noise (docs/accounting.md §13.4). The chance is taken 1e-12
    larger than computed (its rounding is a few ulps), so the shortcut is never optimistic."""
    if not phases or any(q >= 1.0 for q, _, _ in phases):
        return False
    sampled = -math.expm1(math.fsum(t * math.log1p(-q) for q, _, t in phases))
    return delta >= sampled * (1 + 1e-12)


def _full(phases: Sequence[PhaseTuple]) -> bool:
    """Every phase samples every client (q = 1): the history is one Gaussian mechanism (§13.8)."""
    return bool(phases) and all(q >= 1.0 for q, _, _ in phases)


def _gaussian_mu(phases: Sequence[PhaseTuple]) -> float:
    """mu of the Gaussian mechanism the full-participation phases compose to: sqrt(sum T / sigma^2)
    (each step is N(0, sigma^2) against N(1, sigma^2)), rounded up (docs/accounting.md §13.8)."""
    return math.sqrt(math.fsum(t / (sigma * sigma) for _, sigma, t in phases)) * (1 + 1e-14)


# The closed form's delta(eps) is computed within 5.4e-12 of its first term (measured against
# 50-digit arithmetic, mu 1e-3 to 1e3, delta 1e-14 to 0.1); GAUSSIAN_SLACK times that term is
# added to it, so the delta it compares with the budget is never below the exact one (§13.8).
GAUSSIAN_SLACK = 1e-10


def gaussian_delta(eps: float, mu: float) -> float:
    """An upper bound on the hockey-stick divergence of N(mu, 1) from N(0, 1) at ``eps``
    (both orders agree): Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) (Balle and Wang 2018,
    Thm 8; Dong, Roth and Su 2019), plus ``GAUSSIAN_SLACK`` of its first term for rounding."""
    first = math.exp(log_ndtr(mu / 2 - eps / mu))
    second = math.exp(eps + log_ndtr(-mu / 2 - eps / mu))
    return first - second + GAUSSIAN_SLACK * first


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest eps >= 0 found with :func:`gaussian_delta` (an upper bound) at most ``delta``:
    the exact epsilon of the mu-Gaussian mechanism from above, within 1e-8 of it (1e-9 near 0;
    §13.8); inf where none up to 1e9 is."""
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    hi = mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta)) + 1.0  # Gaussian tail: delta(hi) <= delta
    while gaussian_delta(hi, mu) > delta:
        hi *= 2
        if hi > 1e9:
            return math.inf
    lo = 0.0
    # bisection: hi always satisfies the bound
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if gaussian_delta(mid, mu) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


# Where the error terms take more than this share of delta (tiny delta, many steps of a tiny
# rate: the FFT rounding bound grows with the steps), rdp's bound is computed too and the
# smaller of the two sound bounds is the answer (§13.2).
ERROR_SHARE_CHECK = 0.05


# What users read where the grid fails numerically (§13.4); the exception behind it is logged
# at debug level only (accounting.errors.log_fallback_detail).
PLD_NUMERICAL_FALLBACK = (
    "pld's privacy-loss grid cannot represent this history (too little noise or too many steps for "
    "its discretisation, docs/accounting.md §13.4); rdp answered instead, an upper bound"
)


def sound_epsilon(phases: Sequence[PhaseTuple], delta: float) -> tuple[float, str | None]:
    """The PLD epsilon, or rdp's epsilon and the reason: where the discretisation fails
    numerically (noise multipliers near the search floor put single losses beyond e^700,
    §13.4), or where the error terms added to delta leave rdp's bound the lower one (§13.2).
    A ``delta`` of 0 or below (a Skellam history's tail mass took all of it, §11.7): inf."""
    if delta <= 0:
        return math.inf, None
    try:
        with np.errstate(all="ignore"):
            value, share = _epsilon_and_error(phases, delta)
        if value >= 0 and share <= ERROR_SHARE_CHECK:  # inf is a sound answer; nan is not an answer
            return value, None
        if value >= 0:
            rdp = _rdp_epsilon(phases, delta)
            if rdp < value:
                return rdp, (
                    f"pld's error terms take {min(share, 1.0):.0%} of delta (FFT rounding bound and tails, "
                    f"docs/accounting.md §13.2), leaving rdp's bound the lower one; answered by rdp"
                )
            return value, None
        failure = f"epsilon {value}"
    except (ArithmeticError, ValueError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    log_fallback_detail("pld", failure)
    return _rdp_epsilon(phases, delta), PLD_NUMERICAL_FALLBACK


def _rdp_epsilon(phases: Sequence[PhaseTuple], delta: float) -> float:
    """rdp's epsilon of the phases (the fallback and the comparison of :func:`sound_epsilon`)."""
    events: list[ApproximateDpEvent] = [
        PoissonSampledGaussian(sampling_rate=q, noise_multiplier=z, steps=t) for q, z, t in phases
    ]
    return _RDP.epsilon(events, delta).epsilon


# --------------------------------------------------------------------------- many histories at once


class _Pmfs:
    """The connect-the-dots pmfs of many steps (docs/accounting.md §13.1), end to end in flat
    arrays: step r is (q_r, sigma_r) on the points ``h_r * (lo_r .. lo_r + length_r - 1)``,
    stored at ``starts[r] .. starts[r] + length_r - 1`` (``row``: each position's step,
    ``index``: its place in the step's pmf), plus ``inf_mass[r]`` at +infinity. Each cell
    between two points splits its mass between them so that E_P[e^{-L}] is kept; above the
    top point, e^{top} Q(L > top) sits at the top and the rest at +inf; below the bottom
    point the P mass is rounded up to it (pessimistic)."""

    def __init__(
        self, q: np.ndarray, sigma: np.ndarray, direction: str, h: np.ndarray, lo: np.ndarray, length: np.ndarray
    ) -> None:
        self.starts = np.cumsum(length) - length
        self.row = row = np.repeat(np.arange(q.size), length)
        self.index = index = np.arange(row.size) - self.starts[row]

        def spread(values: np.ndarray) -> np.ndarray:
            # each step's value at each of its positions (one step: the value itself, the same numbers)
            return values[0] if values.size == 1 else np.repeat(values, length)

        self.losses = grid = spread(h) * (spread(lo) + index).astype(float)
        p_tail, q_tail = _tails(grid, spread(q), spread(sigma), direction)
        # cell k = (grid_k, grid_{k+1}], both points of one step: all but each step's last point;
        # the quantities below are computed in place on every k, then 0 at those few (``ends``),
        # the values the masked expressions of docs/accounting.md §13.1 give, bit for bit
        ends = (self.starts + length - 1)[:-1] if q.size > 1 else np.zeros(0, dtype=np.int64)
        p_cell = np.subtract(p_tail[:-1], p_tail[1:])
        np.maximum(p_cell, 0.0, out=p_cell)
        p_cell[ends] = 0.0
        q_cell = np.subtract(q_tail[:-1], q_tail[1:])
        np.maximum(q_cell, 0.0, out=q_cell)
        q_cell[ends] = 0.0
        e_grid = np.exp(grid)  # exp acts element by element: the same values as exp of each slice
        e_lo = e_grid[:-1]
        e_hi = e_grid[1:]
        down, up = spread(np.expm1(h)), spread(-np.expm1(-h))
        if not np.isscalar(down):
            down, up = down[:-1], up[:-1]
        to_lower = np.multiply(e_hi, q_cell)
        to_lower -= p_cell
        to_lower /= down
        np.maximum(to_lower, 0.0, out=to_lower)
        to_lower[ends] = 0.0
        to_upper = np.multiply(e_lo, q_cell)
        np.subtract(p_cell, to_upper, out=to_upper)
        to_upper /= up
        np.maximum(to_upper, 0.0, out=to_upper)
        to_upper[ends] = 0.0
        mass = np.zeros(row.size)
        mass[:-1] += to_lower
        mass[1:] += to_upper
        self.tops = top = self.starts + length - 1
        top_q = q_tail[top] * e_grid[top]
        self.inf_mass = np.maximum(p_tail[top] - top_q, 0.0)
        mass[top] += np.minimum(top_q, p_tail[top])
        mass[self.starts] += np.maximum(1.0 - p_tail[self.starts], 0.0)
        self.mass = mass

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Each step's sum of ``values`` (one per position, or rows of them)."""
        return np.add.reduceat(values, self.starts, axis=0)

    def log_mgf(self, lambdas: np.ndarray) -> np.ndarray:
        """:func:`_log_mgf` of each step at ``lambdas`` (one row of them, or one row per step)."""
        lam = np.broadcast_to(lambdas, (self.starts.size, lambdas.shape[-1]))
        shift = np.where(lam > 0, lam * self.losses[self.tops][:, None], lam * self.losses[self.starts][:, None])
        if lambdas.ndim == 1:  # one row of lambdas for every step: padded rows, one batched product
            lengths = self.tops - self.starts + 1
            at = self.starts[:, None] + np.minimum(np.arange(int(lengths.max()))[None, :], lengths[:, None] - 1)
            inside = np.arange(at.shape[1])[None, :] < lengths[:, None]
            losses, mass = self.losses[at], np.where(inside, self.mass[at], 0.0)
            terms = np.multiply(lambdas[None, :, None], losses[:, None, :])
            terms -= shift[:, :, None]
            np.exp(terms, out=terms)
            with np.errstate(divide="ignore"):
                return shift + np.log(np.matmul(terms, mass[:, :, None])[:, :, 0])
        # a few lambdas per step (the fine pass): one weighted count per lambda
        sums = np.empty(lam.shape)
        lengths = self.tops - self.starts + 1
        for k in range(lam.shape[1]):
            if lam.shape[0] == 1:
                terms = np.multiply(lam[0, k], self.losses)
                terms -= shift[0, k]
            else:
                terms = np.repeat(lam[:, k], lengths)
                terms *= self.losses
                terms -= np.repeat(shift[:, k], lengths)
            np.exp(terms, out=terms)
            terms *= self.mass
            sums[:, k] = np.add.reduceat(terms, self.starts)
        with np.errstate(divide="ignore"):
            return shift + np.log(sums)


# Histories per batch of compose_many: a batch's arrays stay within the CPU caches (larger
# batches ran slower than one history at a time: the work is memory-bound, not Python's).
BATCH_HISTORIES = 64


def compose_many(histories: Sequence[Sequence[PhaseTuple]], delta: float, direction: str) -> list[Composed]:
    """Each history's composition in one direction, :data:`BATCH_HISTORIES` at a time
    (:func:`_compose_batch`)."""
    out: list[Composed] = []
    for start in range(0, len(histories), BATCH_HISTORIES):
        out.extend(_compose_batch(histories[start : start + BATCH_HISTORIES], delta, direction))
    return out


def _compose_batch(histories: Sequence[Sequence[PhaseTuple]], delta: float, direction: str) -> list[Composed]:
    """Each history's composition in one direction, computed together (docs/accounting.md
    §13.2-§13.3, §13.6): a coarse pass places each history's window (Chernoff quantiles of the
    composition, from each step's coarse pmf), then the histories on one FFT length are
    composed by one 2-D rfft, a power per phase and one irfft. Every history has its own grid,
    pessimistic rounding and error terms (its FFT rounding bound, tails and +inf mass), and its
    answer does not depend on the other histories of the batch: each array operation acts on
    one history's rows alone."""
    hid = np.repeat(np.arange(len(histories)), [len(h) for h in histories])
    flat = [phase for h in histories for phase in h]
    if any(phase[2] >= STEPS_MAX for phase in flat):
        raise ValueError(f"a phase of {max(phase[2] for phase in flat):.3g} steps (the PLD composes fewer than 2^53)")
    q = np.array([p[0] for p in flat], dtype=float)
    sigma = np.array([p[1] for p in flat], dtype=float)
    t = np.array([p[2] for p in flat], dtype=float)
    n_hist = len(histories)
    total = np.bincount(hid, weights=t, minlength=n_hist)
    steps = total[hid]
    with np.errstate(all="ignore"):
        top = _top_losses(q, sigma, direction, delta * TAIL_SHARE / (4 * steps))
        bottom = _bottom_losses(q, sigma, direction, top, delta * TAIL_SHARE / steps)
        coarse_h = (top - bottom) / 600
        lo = np.floor(bottom / coarse_h).astype(np.int64)
        hi = np.ceil(top / coarse_h).astype(np.int64)
        coarse = _Pmfs(q, sigma, direction, coarse_h, lo, hi - lo + 1)
        mean = coarse.sums(coarse.mass * coarse.losses)
        var = coarse.sums(coarse.mass * (coarse.losses - mean[coarse.row]) ** 2)
        var_total = np.bincount(hid, weights=t * var, minlength=n_hist)
        first = _first_of_runs(hid)
        up = np.add.reduceat(t[:, None] * coarse.log_mgf(_LAMBDAS), first, axis=0)
        down = np.add.reduceat(t[:, None] * coarse.log_mgf(-_LAMBDAS), first, axis=0)
        std = np.sqrt(np.maximum(var_total, 1e-300))
        log_tail = math.log(delta * TAIL_SHARE / 4)
        high = np.min((up - log_tail) / _LAMBDAS, axis=1)
        low = -np.min((down - log_tail) / _LAMBDAS, axis=1)
        low = np.minimum(low, high - 1e-9)
        top = np.minimum(top, high[hid])
        step_h = np.sqrt(8e-4 * np.maximum(high, 1e-2) / total)
        points = np.maximum(np.maximum(STD_STEPS * (high - low) / std, (high - low) / step_h), 1.0)
        sizes = np.minimum(FFT_SIZE_MAX, np.maximum(FFT_SIZE_MIN, 2 ** np.ceil(np.log2(points)))).astype(np.int64)
    out: list[Composed | None] = [None] * n_hist
    # the FFT lengths in ascending order, as np.unique gave them (which made numpy import
    # numpy.ma, ~5 ms of a `gdpfed account` question)
    for n in sorted(set(sizes.tolist())):
        members = np.nonzero(sizes == n)[0]
        answers = _compose_rows(members, n, hid, q, sigma, t, top, bottom, up, high, low, delta, direction)
        for r, value in zip(members, answers, strict=True):
            out[int(r)] = value
    return [c for c in out if c is not None]


def _compose_rows(
    part: np.ndarray, n: int, hid: np.ndarray, q: np.ndarray, sigma: np.ndarray, t: np.ndarray,
    top: np.ndarray, bottom: np.ndarray, up: np.ndarray, high: np.ndarray, low: np.ndarray,
    delta: float, direction: str,
) -> list[Composed]:
    """The fine pass of :func:`_compose_batch` for the histories ``part`` on FFT length ``n``."""
    high_p, low_p = high[part], low[part]
    h = (high_p - low_p) / (n - 1)
    window_lo = np.floor(low_p / h)
    window_hi = window_lo + n - 1
    floor_loss = np.minimum(low_p, 0.0) - (high_p - low_p)
    # the phases of these histories, in order (each history's phases are contiguous)
    rows = np.arange(hid.size) if part.size == high.size else np.nonzero(np.isin(hid, part))[0]
    local = np.searchsorted(part, hid[rows])  # part is sorted (np.nonzero)
    starts = _first_of_runs(local)

    def per_history(values: np.ndarray) -> np.ndarray:
        # the sum over each history's phases, in their order
        return np.add.reduceat(values, starts, axis=0)

    h_r = h[local]
    lo_i = np.floor(np.maximum(bottom[rows], floor_loss[local]) / h_r)
    hi_i = np.maximum(np.ceil(top[rows] / h_r), lo_i + 1)
    length = (hi_i - lo_i + 1).astype(np.int64)
    if np.any(length > STEP_POINTS_MAX):  # the window failed to hold a step: rdp answers (§13.4)
        raise ValueError(f"a step's loss pmf would need {int(np.max(length)):.3g} grid points")
    with np.errstate(all="ignore"):
        fine = _Pmfs(q[rows], sigma[rows], direction, h_r, lo_i.astype(np.int64), length)
    inf_mass = fine.inf_mass
    t_r = t[rows]
    finite = inf_mass < 1  # survive: log P(no step at +inf), per history
    survive = per_history(np.where(finite, t_r * np.log1p(-np.where(finite, inf_mass, 0.0)), -np.inf))
    offset = per_history(t_r * lo_i)
    # wrap each pmf onto the FFT length (the circular convolution places index j at j mod n)
    slots = fine.row * n + fine.index % n
    placed = np.bincount(slots, weights=fine.mass, minlength=rows.size * n).reshape(rows.size, n)
    l2 = np.sqrt(np.sum(np.square(placed), axis=1))
    bound = _FftErrorBound(n)
    spectrum_l2 = per_history(t_r * bound.c_n * l2 + (t_r * (math.pi + 1) + 4) * bound.U + 4 * bound.U)
    fft_l1 = math.sqrt(n) * (spectrum_l2 + bound.c_n)
    powered = _integer_powers(np.fft.rfft(placed, axis=1), t_r.astype(np.int64))
    # one phase per history: each history's product is its one row (reduceat would copy it)
    spectrum = powered if starts.size == rows.size else np.multiply.reduceat(powered, starts, axis=0)
    composed = np.fft.irfft(spectrum, n, axis=1)
    shift = ((window_lo - offset) % n).astype(np.int64)
    values = np.empty_like(composed)
    for r, s in enumerate(shift.tolist()):  # the window starts at index s of the circle: rotate row r by s
        values[r, : n - s] = composed[r, s:]
        values[r, n - s :] = composed[r, :s]
    noise = np.sum(np.where(values < 0, -values, 0.0), axis=1)
    np.maximum(values, 0.0, out=values)
    # the Chernoff bound on the mass above the window, on the fine pmfs (as compose)
    best = _LAMBDAS[np.argmin(up[part] - _LAMBDAS[None, :] * (window_hi * h)[:, None], axis=1)]
    lambdas = best[:, None] * np.array([0.8, 1.0])[None, :]
    with np.errstate(all="ignore"):
        fine_up = per_history(t_r[:, None] * fine.log_mgf(lambdas[local]))
    above = np.minimum(np.exp(np.minimum(np.min(fine_up - lambdas * (window_hi * h)[:, None], axis=1), 0.0)), 1.0)
    inf_total = -np.expm1(survive)
    error = above + np.maximum(fft_l1, 2 * noise)
    grid = h[:, None] * (window_lo[:, None] + np.arange(n)[None, :])
    return [Composed(grid[r], values[r], float(inf_total[r]), float(error[r])) for r in range(part.size)]


def _integer_powers(spectra: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Row r of ``spectra`` raised to ``steps[r]`` by binary powering (the method numpy uses for
    powers below 100; about ten complex products instead of ``exp(t log s)`` per entry). Its
    rounding error is within the allowance of :class:`_FftErrorBound` (§13.2): with complex
    products accurate to ``sqrt(5) u`` relative, the computed ``s^t`` is accurate to
    ``(t - 1) sqrt(5) u`` relative to first order, below ``(t (pi + 1) + 4) u`` for an entry
    of modulus <= 1."""
    out = np.ones_like(spectra)
    base = spectra.copy()
    remaining = steps.copy()
    while True:
        odd = (remaining & 1).astype(bool)
        if odd.all():
            out *= base
        elif odd.any():
            np.multiply(out, base, out=out, where=odd[:, None])
        remaining >>= 1
        if not remaining.any():
            return out
        base *= base


_TOP_CANDIDATES = np.geomspace(1e-4, 700.0, 137)


def _first_of_runs(labels: np.ndarray) -> np.ndarray:
    """Indices where a run of equal consecutive labels starts (each history's first phase)."""
    return np.concatenate(([0], np.flatnonzero(labels[1:] != labels[:-1]) + 1))


def _top_losses(q: np.ndarray, sigma: np.ndarray, direction: str, budget: np.ndarray) -> np.ndarray:
    """:func:`_top_loss` of every row."""
    cap = np.full(q.shape, np.inf)
    if direction == "add":
        cap = np.where(q < 1, -np.log1p(-np.where(q < 1, q, 0.0)), np.inf)
    candidates = _TOP_CANDIDATES
    below = candidates[None, :] < cap[:, None]
    p, qq = _tails(np.broadcast_to(candidates, below.shape), q[:, None], sigma[:, None], direction)
    deltas = np.where(qq > 0, p - np.exp(candidates)[None, :] * qq, p)
    fits = below & (deltas <= budget[:, None])
    first = np.argmax(fits, axis=1)
    none_below = ~below[:, 0]
    no_fit = ~fits.any(axis=1)
    last_below = candidates[np.maximum(below.sum(axis=1) - 1, 0)]
    fallback = np.where(np.isfinite(cap), cap, last_below)
    value = np.where(no_fit, fallback, candidates[first])
    return np.where(none_below, cap, value)


def _bottom_losses(q: np.ndarray, sigma: np.ndarray, direction: str, top: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """:func:`_bottom_loss` of every row."""
    z = np.maximum(np.sqrt(2 * np.log(1 / np.maximum(mass, 1e-300))), 4.0)
    if direction == "remove":
        x = -z * sigma
        value = np.log((1 - q) + q * np.exp((2 * x - 1) / (2 * sigma**2)))
        floor = np.where(q < 1, np.log1p(-np.where(q < 1, q, 0.0)), -np.inf)
        value = np.maximum(value, floor)
    else:
        x = z * sigma
        arg = (2 * x - 1) / (2 * sigma**2)
        value = -(np.log(q) + arg + np.log1p((1 - q) / q * np.exp(-arg)))
    return np.minimum(value, top - 1e-9)


def sound_epsilons(histories: Sequence[Sequence[PhaseTuple]], delta: float) -> list[tuple[float, str | None]]:
    """:func:`sound_epsilon` of every history, equal to it bit for bit: the PLD part composed for
    all of them together (:func:`compose_many`, docs/accounting.md §13.6), rdp's comparison
    and fallbacks per history where one needs them."""
    if not histories:
        return []
    if delta <= 0:  # as sound_epsilon: a Skellam history's tail mass took all of delta (§11.7)
        return [(math.inf, None) for _ in histories]
    try:
        with np.errstate(all="ignore"):
            answers = _epsilons_and_errors(histories, delta)
    except (ArithmeticError, ValueError):
        return [sound_epsilon(h, delta) for h in histories]
    return [
        (value, None) if value >= 0 and share <= ERROR_SHARE_CHECK else sound_epsilon(h, delta)
        for h, (value, share) in zip(histories, answers, strict=True)
    ]


# --------------------------------------------------------------------------- the accountant


class PldAccountant(Accountant):
    name: ClassVar[AccountantName] = "pld"
    verified_by: ClassVar[AccountantName] = "pld"
    per_round: ClassVar[AccountantName] = _RDP.name
    tabulated_by: ClassVar[AccountantName] = _RDP.name
    # a history with an event the PLD does not represent (zCDP) is answered by rdp, marked (§13.4)
    fallback: ClassVar[AccountantName | None] = _RDP.name
    calibrates_in_lockstep: ClassVar[bool] = True
    supports: ClassVar[tuple[type[ApproximateDpEvent], ...]] = (ApproximateDpEvent,)

    def unrepresented(self, events: Sequence[ApproximateDpEvent]) -> str | None:
        """Why the PLD cannot account for these events (the kinds it does not represent, §13.4,
        or a Skellam event without a tabulated dominating Gaussian, §11.7), or None."""
        return _unrepresented(events)

    def phases(self, events: Sequence[ApproximateDpEvent]) -> list[PhaseTuple]:
        """Each event's Gaussian phase: its own, or the one dominating a Skellam event (§11.7)."""
        return _phases(events)

    def composition_delta(self, events: Sequence[ApproximateDpEvent], delta: float) -> float:
        """``delta`` less the Skellam events' tail masses (:func:`_pld_delta`, §11.7)."""
        return _pld_delta(events, delta)

    def epsilon(
        self, events: list[ApproximateDpEvent], delta: float, *, time_limit_s: float | None = None
    ) -> EpsilonReport:
        """The connect-the-dots PLD upper bound (docs/accounting.md §13), or rdp's answer marked ``fallback``."""
        reason = self.unrepresented(events)
        if reason:
            return self._rdp_report(events, delta, reason)
        value, failed = sound_epsilon(_phases(events), _pld_delta(events, delta))
        if failed:
            return self._rdp_report(events, delta, failed)
        return EpsilonReport(epsilon=value, delta=delta, accountant=self.name, accountant_used=self.name)

    def epsilons(self, histories: list[list[ApproximateDpEvent]], delta: float) -> list[EpsilonReport]:
        """:meth:`epsilon` of every history, equal to it bit for bit: the representable ones
        composed together (:func:`sound_epsilons`, docs/accounting.md §13.6), those with Skellam
        events grouped by the reduced delta they compose at (§11.7)."""
        together = [i for i, events in enumerate(histories) if not self.unrepresented(events)]
        composed = _sound_answers([(_phases(histories[i]), _pld_delta(histories[i], delta)) for i in together])
        answers = dict(zip(together, composed, strict=True))
        reports = []
        for i, events in enumerate(histories):
            value, failed = answers.get(i, (math.nan, "unrepresented"))
            if i not in answers or failed:
                reports.append(self.epsilon(events, delta))  # rdp's answer, marked, as one at a time
            else:
                reports.append(EpsilonReport(epsilon=value, delta=delta, accountant=self.name, accountant_used=self.name))
        return reports

    def _rdp_report(self, events: list[ApproximateDpEvent], delta: float, reason: str) -> EpsilonReport:
        return _RDP.epsilon(events, delta).model_copy(update={"accountant": self.name, "fallback": True, "reason": reason})

    def _history(
        self, spent: list[ApproximateDpEvent], delta: float, target: float, fallback: Callable[[], Calibration]
    ) -> History | Calibration:
        """:meth:`Accountant.history_or_fallback` with the spent phases' PLD epsilon at the delta
        they compose at (``delta`` less the spent Skellam tail masses, §11.7; ``History.delta``)."""
        return self.history_or_fallback(
            spent, delta, target, fallback, lambda phases: sound_epsilon(phases, self.composition_delta(spent, delta))[0]
        )

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
        """docs/accounting.md §13.5: the least sigma of the lattice e^{k XTOL} the PLD epsilon
        certifies, its lower neighbour certified infeasible (§7.8's search)."""
        q, t = sampling_rate, rounds
        prior = self._history(spent, delta, target, lambda: _RDP.noise_multiplier(q, t, target, delta, spent))
        if isinstance(prior, Calibration):
            return prior
        history = prior
        return search.drive(
            _sigma_search(q, t, target, delta, history),
            lambda sigmas: _sound_answers([(history.plus(q, sigma, t), history.composed_at(delta)) for sigma in sigmas]),
        )

    def noise_multiplier_exists(
        self, sampling_rate: float, rounds: int, target: float, delta: float, spent: list[ApproximateDpEvent]
    ) -> bool:
        """docs/accounting.md §7.9: :meth:`noise_multiplier` raises InfeasibleError exactly when
        the spent events alone exceed the target (:meth:`_history`) or when its lattice search
        evaluates its top point e^{log SIGMA_MAX} infeasible (§7.8; feasible is
        ``log_ratio(epsilon, target) <= 0``, the sign of §13.5's g). So one composition at that
        point answers, where the search takes several (a re-plan's room question, issue 26 §2).
        Events pld does not represent are asked of rdp, as the calibration falls back."""
        q, t = sampling_rate, rounds
        try:
            prior = self._history(spent, delta, target, lambda: _RDP.noise_multiplier(q, t, target, delta, spent))
        except InfeasibleError:
            return False
        if isinstance(prior, Calibration):  # rdp answered for events pld does not represent
            return True
        top = math.exp(math.log(SIGMA_MAX))  # the search's x_max, as _on_log_sigma evaluates it
        ((epsilon, _),) = _sound_answers([(prior.plus(q, top, t), prior.composed_at(delta))])
        return search.log_ratio(epsilon, target) <= 0

    def noise_multipliers(
        self,
        questions: Sequence[tuple[float, int, float, list[ApproximateDpEvent]]],
        delta: float,
        starts: Sequence[float | None] | None = None,
    ) -> list[Calibration | InfeasibleError]:
        """:meth:`noise_multiplier` of every (sampling_rate, rounds, target, spent), equal to it
        answer for answer, bit for bit (docs/accounting.md §13.7): the searches run in lockstep
        (:func:`search.lockstep`) and each round's sigmas are composed together
        (:func:`sound_epsilons`); questions that are the same (q, T, target, spent history and
        start) share one search, whose answer each gets. ``starts[i]``: a neighbouring answer
        question i's search starts from (:func:`_sigma_search`, §13.5), None for the default."""
        out: list[Calibration | InfeasibleError | None] = [None] * len(questions)
        searches: list[Generator[list[float], list[Answer], Calibration]] = []
        asked: list[tuple[int, float, int, History]] = []  # (question, q, T, history) of each search
        same: dict[tuple[object, ...], int] = {}  # a question's key -> its search
        copies: list[tuple[int, int]] = []  # (question, search) of a question answered by another's search
        for i, (q, t, target, spent) in enumerate(questions):
            try:
                prior = self._history(
                    spent, delta, target, lambda q=q, t=t, target=target, spent=spent: _RDP.noise_multiplier(  # type: ignore[misc]
                        q, t, target, delta, spent
                    )
                )
            except InfeasibleError as exc:
                out[i] = exc
                continue
            if isinstance(prior, Calibration):
                out[i] = prior
                continue
            start = None if starts is None else starts[i]
            key = (q, t, target, tuple(prior.phases), prior.delta, prior.spent_epsilon, start)
            if key in same:
                copies.append((i, same[key]))
                continue
            same[key] = len(searches)
            searches.append(_sigma_search(q, t, target, delta, prior, start))
            asked.append((i, q, t, prior))

        def answer_many(points: list[tuple[int, list[float]]]) -> list[list[Answer]]:
            # every search's one or two sigmas of the round, composed together; each search's
            # history composes at its own delta (less its spent Skellam tail masses, §11.7)
            flat = _sound_answers([
                (asked[k][3].plus(asked[k][1], sigma, asked[k][2]), asked[k][3].composed_at(delta))
                for k, sigmas in points for sigma in sigmas
            ])
            rounds, at = [], 0
            for _, sigmas in points:
                rounds.append(flat[at : at + len(sigmas)])
                at += len(sigmas)
            return rounds

        results = search.lockstep(searches, answer_many)
        for (i, *_), result in zip(asked, results, strict=True):
            if isinstance(result, Exception) and not isinstance(result, InfeasibleError):
                raise result
            out[i] = result
        for i, k in copies:
            shared = results[k]
            out[i] = shared.model_copy() if isinstance(shared, Calibration) else shared  # type: ignore[assignment]
        return [answer for answer in out if answer is not None]

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
        prior = self._history(spent, delta, target, lambda: _RDP.sampling_rate(sigma, t, target, delta, spent))
        if isinstance(prior, Calibration):
            return prior
        history = prior

        def eps_at(rate: float) -> float:
            return sound_epsilon(history.plus(rate, sigma, t), history.composed_at(delta))[0]

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
        achieved, failed = sound_epsilon(history.plus(rate, sigma, t), history.composed_at(delta))
        return rate_result(
            Answered(rate, sigma, t, delta, target, achieved, self.name, history.spent_epsilon),
            failed=failed, used=_RDP.name if failed else None,
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
        """docs/accounting.md §7.4 on the PLD epsilon: steps on log T from a guess, certified."""
        q, sigma = sampling_rate, noise_multiplier
        prior = self._history(spent, delta, target, lambda: _RDP.rounds(q, sigma, target, delta, spent))
        if isinstance(prior, Calibration):
            return prior
        history = prior

        def eps_at(count: int) -> float:
            return sound_epsilon(history.plus(q, sigma, count), history.composed_at(delta))[0]

        # the small-q Gaussian-like guess is the start (rdp's answer would build its order grid, about
        # 0.1 s in a cold process): it changes the cost only, the answer is certified (T fits, T + 1
        # does not; docs/accounting.md §7.4)
        start = rounds_guess(q, sigma, target, delta)
        def excess(count: int) -> float:  # log(eps / target), its sign exactly eps <= target's
            epsilon = eps_at(count)
            value = search.log_ratio(epsilon, target)
            if (value <= 0) != (epsilon <= target):  # eps / target rounded to 1 beside the target
                return math.ulp(0.0) if epsilon > target else 0.0
            return value

        count = search.largest_fitting(excess, ROUNDS_MAX, start)
        failed = None
        if count:
            achieved, failed = sound_epsilon(history.plus(q, sigma, count), history.composed_at(delta))
        else:
            achieved = history.spent_epsilon if history.spent_epsilon is not None else 0.0
        result = rounds_result(
            count, q, sigma, delta, target, achieved, self.name, _RDP.name if failed else self.name,
            history.spent_epsilon,
        )
        return result.model_copy(update={"fallback": True, "reason": failed}) if failed else result


# Each point's answer: (the PLD epsilon, or rdp's, and the reason rdp answered, or None).
Answer = tuple[float, str | None]


def _sound_answers(items: Sequence[tuple[list[PhaseTuple], float]]) -> list[Answer]:
    """:func:`sound_epsilon` of every (phases, delta), bit for bit: those at one delta composed
    together (:func:`sound_epsilons`); a Skellam history composes at its own reduced delta (§11.7)."""
    by_delta: dict[float, list[int]] = {}
    for k, (_, at) in enumerate(items):
        by_delta.setdefault(at, []).append(k)
    out: list[Answer] = [(math.nan, None)] * len(items)
    for at, members in by_delta.items():
        for k, answer in zip(members, sound_epsilons([items[k][0] for k in members], at), strict=True):
            out[k] = answer
    return out


def _unrepresented(events: Sequence[ApproximateDpEvent]) -> str | None:
    """Why the PLD cannot account for these events (the kinds it does not represent), or None."""
    kinds = sorted({event.kind for event in events if not isinstance(event, (PoissonSampledGaussian, PoissonSampledSkellam))})
    if kinds:
        return f"pld represents Poisson-subsampled Gaussian and Skellam events only, not {', '.join(kinds)}; fell back to rdp"
    if any(isinstance(event, PoissonSampledSkellam) and event.dominating_gaussian() is None for event in events):
        return (
            "a Skellam event's variance is outside the tabulated range or its sensitivity beyond the tabulated "
            "tail (docs/accounting.md §11.7); fell back to rdp"
        )
    return None


def _phases(events: Sequence[ApproximateDpEvent]) -> list[PhaseTuple]:
    """Each event's Gaussian phase: its own, or the one dominating a Skellam event (§11.7)."""
    out = []
    for event in events:
        if isinstance(event, PoissonSampledSkellam):
            dominating = event.dominating_gaussian()
            assert dominating is not None  # _unrepresented was checked first
            out.append((event.sampling_rate, dominating[0], event.steps))
            continue
        assert isinstance(event, PoissonSampledGaussian)  # _unrepresented was checked first
        out.append((event.sampling_rate, event.noise_multiplier, event.steps))
    return out


def _pld_delta(events: Sequence[ApproximateDpEvent], delta: float) -> float:
    """``delta`` less the Skellam events' tail masses (steps * eta each, docs/accounting.md §11.7):
    the delta the dominating Gaussian phases are composed at."""
    extra = 0.0
    for event in events:
        if isinstance(event, PoissonSampledSkellam):
            dominating = event.dominating_gaussian()
            extra += 1.0 if dominating is None else dominating[1]
    return delta - extra if extra else delta


def _sigma_search(
    q: float, t: int, target: float, delta: float, history: History, start: float | None = None
) -> Generator[list[float], list[Answer], Calibration]:
    """The noise-multiplier search of docs/accounting.md §13.5 as a generator: it yields each
    round's sigmas (one or two) it needs the answers of :func:`sound_epsilon` for
    (``history.plus(q, sigma, t)``) and returns the Calibration, so that one question
    (:func:`search.drive`) and many in lockstep (:func:`search.lockstep`) run the same steps.
    The answer is the smallest sigma of the lattice e^{k XTOL} found feasible whose lower
    neighbour was found infeasible (:func:`search.lattice_steps`): both evaluated, so the sigma
    is certified by the evaluation that found it, and the same whichever start the search had
    where epsilon does not rise with sigma. ``start``: a neighbouring question's answer (sigma)
    the caller knows, whose lattice point and the one below are asked first (§13.5); without
    it the search starts from :func:`sigma_guess`. Nothing else is kept between searches: the
    answer is a function of the question and ``start`` alone."""
    answers: dict[float, Answer] = {}  # sigma -> its answer, each asked once
    if start is not None:
        x0, expected = math.log(start), True
    else:
        remaining = max(target - (history.spent_epsilon or 0.0), 0.05 * target)
        x0, expected = math.log(float(sigma_guess(np.array([q]), t, np.array([remaining]), delta)[0])), False
    try:
        # log epsilon falls 2-5 times as fast as log sigma rises near the answer: the first
        # step (|g(guess)| / slope) then lands next to the root, not 2-3x beyond it
        found = yield from _on_log_sigma(
            search.lattice_steps(
                x0, XTOL, math.log(SIGMA_MIN), math.log(SIGMA_MAX), slope=BRACKET_SLOPE, expected=expected
            ),
            answers,
            target,
            history.spent_epsilon,
        )
    except search.NoFeasiblePoint:
        raise no_noise_meets(target, q, t, delta) from None
    sigma = math.exp(found.hi)
    achieved, failed = answers[sigma]  # hi is always an evaluated point
    return noise_result(
        Answered(q, sigma, t, delta, target, achieved, PldAccountant.name, history.spent_epsilon),
        at_floor=found.at_floor, failed=failed, used=_RDP.name if failed else None,
    )


def _on_log_sigma(
    steps: Generator[list[float], list[float], search.Bracket],
    answers: dict[float, Answer],
    target: float,
    spent: float | None = None,
) -> Generator[list[float], list[Answer], search.Bracket]:
    """Run a search on x = log sigma (g(x) = log(epsilon / target), or :func:`_shifted_ratio` after
    ``spent``), asking for the answer at each sigma = e^x once (``answers`` keeps them)."""
    try:
        xs = next(steps)
        while True:
            sigmas = [math.exp(x) for x in xs]
            new = [sigma for sigma in sigmas if sigma not in answers]
            if new:
                for sigma, answer in zip(new, (yield new), strict=True):
                    answers[sigma] = answer
            xs = steps.send([_shifted_ratio(answers[sigma][0], target, spent) for sigma in sigmas])
    except StopIteration as stop:
        return stop.value


def _shifted_ratio(epsilon: float, target: float, spent: float | None) -> float:
    """g of the noise-multiplier search (docs/accounting.md §13.5): log(epsilon / target), or, after
    spent events of epsilon ``spent`` below the target, log((epsilon - spent) / (target - spent)),
    the new phase's share of what is left. Its sign is always that of log(epsilon / target) (the
    feasibility that certifies the answer); only its shape changes: where the spent events take
    most of the budget log(epsilon / target) barely moves with sigma, and a Newton step of the
    typical slope from it landed far from the root."""
    plain = search.log_ratio(epsilon, target)
    if spent is None or not 0.0 < spent < target or not math.isfinite(plain):
        return plain
    shifted = search.log_ratio(epsilon - spent, target - spent)
    if plain > 0:  # infeasible stays infeasible, whatever the subtraction rounded
        return shifted if shifted > 0 else math.ulp(0.0)
    return min(shifted, 0.0)
