"""The discrete distributed mechanism's parameters: scale, rounding bound, Skellam noise, bit width.

docs/secure-aggregation.md, "Discrete noise: the distributed Skellam mechanism", and
docs/accounting.md §11.6. Pure arithmetic (numpy, scipy, the accounting package): the
planner calibrates with it and the clients' pipeline (``trainer/secagg/discrete.py``)
reads its bounds from here, so the two can never disagree on a bound.

A client of a pool clips its update to L2 norm ``C``, multiplies it by the scale ``s``
(the grid step is ``gamma = 1/s``), pads it to ``d' = 2^ceil(log2 d)`` coordinates,
rotates it with the randomised Hadamard transform ``H D`` (``D`` a public random sign
diagonal, fresh each round; ``H`` orthonormal, so the norm stays ``<= C s``), rounds it
with conditional randomised rounding (re-drawn until its L2 norm is at most
:func:`rounded_l2_bound`, so the bound holds always), adds a Skellam noise share of
variance ``share_variance`` and encodes mod ``2^b``. The server's sum decodes exactly
whenever no coordinate of the integer sum leaves ``[-2^(b-1), 2^(b-1))``; the
probability that one does in a round is bounded by :func:`wrap_probability`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

import accounting
from accounting import rdp as rdp_math
from accounting.accountants import (
    ACCOUNTANTS,
    DEFAULT_ACCOUNTANT,
    RDP_ACCOUNTANT,
    TIGHT_ACCOUNTANT,
    AccountantName,
    get_accountant,
)
from accounting.errors import InfeasibleError, InvalidInputError
from accounting.events import PoissonSampledGaussian, PoissonSampledSkellam
from accounting.events.poisson_sampled_skellam import (
    DOMINATION_MARGIN,
    MAX_TABULATED_VARIANCE,
    central_step,
    top_order,
    unit_shift_table,
    zhu_wang_rdp,
)
from accounting.validation import validate_count, validate_delta, validate_positive, validate_sampling_rate
from planner.schema import DiscreteMechanism, NumbersModel

if TYPE_CHECKING:
    from planner.schema import GroupPlan, Plan

# Conditional rounding's per-draw failure probability beta (Kairouz, Liu, Steinke 2021): each
# draw meets the bound with probability >= 1 - beta, so a client draws at most 1 / (1 - beta)
# = 1.16 times on average (TFF's e^-0.5 allows 2.5; in practice one draw almost always
# suffices, because a rotated update's rounding noise sum p (1 - p) is well below d'/4). The
# price is 2 (C s + sqrt(d')/2) in D2^2 instead of 1 (C s + sqrt(d')/2): 0.03% of (C s)^2
# at the default grid.
ROUNDING_BETA = math.exp(-2.0)
# The squared-norm inflation of rounding the scale is chosen for: (D2 / (C s))^2 <= 1 + this.
ROUNDING_INFLATION = 0.004
# Per round, the wrap-around probability the bit width is chosen for is delta / (this * rounds):
# over a whole run the wraps take at most 1/1000 of delta.
WRAP_SHARE_OF_DELTA = 1000.0
MAX_BITS = 62
# The accountant of the rdp route (plans of every accountant but pld): rdp's curve of the
# Skellam event, Zhu and Wang's general subsampling bound (docs/accounting.md §11.6). Kept as
# it was before the tight route existed, so that plans of those accountants reproduce.
_CURVE_ACCOUNTANT = ACCOUNTANTS[DEFAULT_ACCOUNTANT].per_round
# The tight route: mu's square root is set this much above what the central step's closed form
# asks for, so that the table's largest step (the central one, up to its rounding of about 1e-10
# relative at mu = 5e9) meets the dominating Gaussian's sigma at the first evaluation.
_SQRT_MU_SAFETY = 1e-9
# If pld's certification of a tight calibration misses a budget (its grid, or a tail mass eta
# that is not negligible), mu is raised by this relative step, quadrupled at each further miss.
_RAISE_STEP = 1e-6
_RAISES = 24


def calibration_accountant(accountant: AccountantName) -> AccountantName:
    """The accountant that calibrates a plan's discrete blocks and states their epsilon
    (docs/secure-aggregation.md §Discrete noise, "Calibration"): pld, the tight one, for a plan
    whose figures of record are pld's; rdp for every other (rdp's own, and prv and closed_form,
    which cannot account the Skellam event; docs/accounting.md §11.6)."""
    return TIGHT_ACCOUNTANT if get_accountant(accountant).verified_by == TIGHT_ACCOUNTANT else RDP_ACCOUNTANT


def padded_dimension(dimension: int) -> int:
    """d' = the smallest power of two >= d: the Hadamard transform's length."""
    return 1 << max(0, (int(dimension) - 1).bit_length())


def rounded_l2_bound(clip_norm: float, scale: float, dimension: int, beta: float = ROUNDING_BETA) -> float:
    """The L2 bound conditional rounding enforces on a rotated, scaled vector of norm <= C s.

    min(C s + sqrt(d'), sqrt((C s)^2 + d'/4 + sqrt(2 log(1/beta)) (C s + sqrt(d')/2)))
    (Kairouz, Liu, Steinke 2021, conditional randomised rounding). The first term holds
    for any rounding to floor or ceiling (each coordinate moves by less than 1); the
    second is met by one randomised draw with probability >= 1 - beta. A client re-draws
    until its vector meets the bound, so it holds always.
    """
    c = clip_norm * scale
    root_d = math.sqrt(padded_dimension(dimension))
    tight = math.sqrt(c * c + root_d * root_d / 4.0 + math.sqrt(2.0 * math.log(1.0 / beta)) * (c + root_d / 2.0))
    return min(c + root_d, tight)


def rounded_l1_bound(l2_bound: float, dimension: int) -> float:
    """An integer vector of L2 norm <= D2 in d' coordinates has L1 norm <= min(D2^2, sqrt(d') D2).

    (|v| <= v^2 for an integer v, and Cauchy-Schwarz.)
    """
    return min(l2_bound * l2_bound, math.sqrt(padded_dimension(dimension)) * l2_bound)


def skellam_tail(variance: float, k: float) -> float:
    """Chernoff's bound on P(|Sk| >= k) for Skellam noise of ``variance`` (E e^(l X) = e^(V (cosh l - 1)))."""
    if k <= 0:
        return 1.0
    ratio = k / variance
    exponent = variance * (math.sqrt(1.0 + ratio * ratio) - 1.0) - k * math.asinh(ratio)
    return min(1.0, 2.0 * math.exp(exponent))


def wrap_probability(
    bits: int, clients: int, clip_norm: float, scale: float, dimension: int, share_variance: float,
    count_factor: int = 0,
) -> float:
    """An upper bound on P(some coordinate of one round's integer sum leaves [-2^(b-1), 2^(b-1))).

    For ``clients`` = n summed vectors: coordinate j of the sum is (H D y)_j + e_j + Z_j
    with y the sum of the scaled updates (||y|| <= n C s), |e_j| < n the rounding errors
    and Z_j Skellam of variance n * share_variance. Over the public random signs D,
    Hoeffding gives P(|(H D y)_j| >= a) <= 2 exp(-a^2 d' / (2 (n C s)^2)); the noise
    tail is :func:`skellam_tail`. With a + n + k = 2^(b-1) - 1, a union bound over the d'
    coordinates and the two tails, minimised over the split of a and k (199 splits). With
    adaptive clipping's count coordinate (``count_factor`` m > 0: each client adds +-m,
    unrotated) one more coordinate: |sum| <= n m plus its Skellam noise, so the union adds
    P(|Z| >= 2^(b-1) - 1 - n m).
    """
    return float(
        _wrap_probabilities(np.array([bits]), clients, clip_norm, scale, dimension, share_variance, count_factor)[0]
    )


# The splits of the room 2^(b-1) - 1 - n between the rotated signal (a) and the noise (k).
_SPLITS = np.linspace(0.0, 1.0, 201)[1:-1]


def _wrap_probabilities(
    bits: np.ndarray, clients: int, clip_norm: float, scale: float, dimension: int, share_variance: float,
    count_factor: int = 0,
) -> np.ndarray:
    """:func:`wrap_probability` at every bit width of ``bits``, in one array operation (each
    bit width's row of splits is independent of the others', so an entry is the same whatever
    else is asked)."""
    n, dp = int(clients), padded_dimension(dimension)
    room = 2.0 ** (np.asarray(bits, dtype=float) - 1.0) - 1.0 - n
    a = np.maximum(room, 0.0)[:, None] * _SPLITS
    k = np.maximum(room, 0.0)[:, None] * (1.0 - _SPLITS)
    signal = n * clip_norm * scale
    variance = n * share_variance
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        rotated = 2.0 * np.exp(-a * a * dp / (2.0 * signal * signal)) if signal > 0 else np.zeros_like(a)
        best = np.minimum(1.0, np.min(dp * (rotated + _skellam_tails(variance, k)), axis=1))
        if count_factor:  # the count coordinate's term of the union, added after the minimum over splits
            count_room = 2.0 ** (np.asarray(bits, dtype=float) - 1.0) - 1.0 - n * count_factor
            best = np.minimum(1.0, best + _skellam_tails(variance, count_room))
    return np.where(room > 0, best, 1.0)


def _skellam_tails(variance: float, k: np.ndarray) -> np.ndarray:
    """:func:`skellam_tail` at every entry of ``k`` (1 where k <= 0), vectorised: the square
    root's difference without cancellation."""
    ratio = k / variance
    exponent = variance * (ratio * ratio / (np.sqrt(1.0 + ratio * ratio) + 1.0)) - k * np.arcsinh(ratio)
    return np.where(k > 0, np.minimum(1.0, 2.0 * np.exp(exponent)), 1.0)


def bits_for(
    bound: float, clients: int, clip_norm: float, scale: float, dimension: int, share_variance: float,
    count_factor: int = 0,
) -> tuple[int, float]:
    """The smallest b whose :func:`wrap_probability` is <= ``bound``, with that probability."""
    widths = np.arange(2, MAX_BITS + 1)
    chances = _wrap_probabilities(widths, clients, clip_norm, scale, dimension, share_variance, count_factor)
    meets = np.flatnonzero(chances <= bound)
    if meets.size == 0:
        raise InfeasibleError(f"no bit width up to {MAX_BITS} keeps the wrap-around probability below {bound:g}")
    return int(widths[meets[0]]), float(chances[meets[0]])


def count_factor_for(l2_bound: float, noise_multiplier: float, count_noise_std: float) -> int:
    """m, the integer factor of adaptive clipping's count coordinate (docs/secure-aggregation.md
    §Discrete noise, "Adaptive clipping").

    Each client appends m (2 b - 1) = 2 m (b - 1/2) to its rounded update (L2 norm <= D2), so
    the released vector's sensitivity is sqrt(D2^2 + m^2). The continuous plan gives the count
    the share f = z_eff^2 / (2 sigma_b)^2 of the squared sensitivity in noise units
    (planner/adaptive_clip.py); m = ceil(D2 sqrt(f / (1 - f))) gives it the same share, so the
    count's noise std sqrt(mu) / (2 m) is about sigma_b (a little below: m is rounded up).
    Any m >= 1 is sound: the Skellam noise is calibrated for the m stated.
    """
    share = noise_multiplier**2 / (4.0 * count_noise_std**2)
    if not 0.0 < share < 1.0:
        raise InvalidInputError(
            "adaptive_clip.count_noise_std",
            f"{count_noise_std:.6g} must exceed z_eff / 2 = {noise_multiplier / 2:.6g} for the discrete count",
        )
    return max(1, math.ceil(l2_bound * math.sqrt(share / (1.0 - share))))


def released_sensitivities(l2_bound: float, l1_bound: float, count_factor: int) -> tuple[float, float]:
    """(L2, L1) of a released vector: the rounded update's (D2, D1) with the count coordinate
    +-m appended, sqrt(D2^2 + m^2) and D1 + m (the update alone for m = 0). Integers, no rounding."""
    if not count_factor:
        return l2_bound, l1_bound
    return math.sqrt(l2_bound * l2_bound + count_factor * count_factor), l1_bound + count_factor


def widest_clip(plan: Plan, pool_id: str) -> float:
    """The largest clip norm of any group of pool ``pool_id``, the norm its bit width b covers
    (docs/secure-aggregation.md §Discrete noise): the planner's derivation and the trainer's
    check of a block's own noise (``trainer.units.client.discrete``) read it alike."""
    return max(g.clip_norm for g in plan.groups if g.pool == pool_id)


def count_std(total_variance: float, count_factor: int) -> float | None:
    """The count coordinate's noise std sqrt(mu) / (2 m) at total variance mu and count factor
    m (docs/secure-aggregation.md §Discrete noise, "Adaptive clipping"); ``None`` without a
    count (m = 0). The block states it; the trainer re-derives it from a block's own noise."""
    return math.sqrt(total_variance) / (2.0 * count_factor) if count_factor else None


def choose_scale(clip_norm: float, dimension: int, inflation: float = ROUNDING_INFLATION) -> float:
    """The smallest power of two s with (rounded_l2_bound / (C s))^2 <= 1 + ``inflation``."""
    scale = 2.0 ** math.floor(math.log2(1.0 / clip_norm))
    while (rounded_l2_bound(clip_norm, scale, dimension) / (clip_norm * scale)) ** 2 > 1.0 + inflation:
        scale *= 2.0
    return scale


def gaussian_epsilon_same_bound(sampling_rate: float, noise_multiplier: float, rounds: int, delta: float) -> float:
    """The continuous Gaussian's epsilon through the same subsampling bound (Zhu and Wang 2019).

    The figure the discretisation overhead is measured against: same noise, same
    subsampling bound, only the mechanism differs.
    """
    grid = rdp_math.order_grid()
    base = np.arange(top_order(grid.orders) + 1, dtype=float) / (2.0 * noise_multiplier**2)
    curve = rounds * zhu_wang_rdp(grid.orders, sampling_rate, base)
    return rdp_math.epsilon_from_rdp(grid.orders, curve, delta)[0]


def threat_model_line(min_survivors: int, colluding_clients: int) -> str:
    """What the guarantee assumes, in one line (plans, ledger, console)."""
    who = (
        "no client colludes with the server"
        if colluding_clients == 0
        else (f"up to {colluding_clients} clients collude with the server (their noise shares are not counted)")
    )
    return (
        f"honest-but-curious server; {who}; released sums have >= {min_survivors} survivors, "
        f"so the noise of >= {min_survivors - colluding_clients} honest survivors is counted"
    )


# One rdp pool's epsilons by question: the spent events, the new rounds' event, delta (see _skellam_epsilon).
_Asked = dict[tuple[tuple[PoissonSampledSkellam, ...], PoissonSampledSkellam, float], float]


def _skellam_epsilon(
    sampling_rate: float,
    variance: float,
    l2: float,
    l1: float,
    rounds: int,
    delta: float,
    spent: Sequence[PoissonSampledSkellam] = (),
    asked: _Asked | None = None,
) -> float:
    """Epsilon of ``spent`` then ``rounds`` releases of this Skellam event, composed at ``delta`` by
    the rdp route's accountant (:data:`_CURVE_ACCOUNTANT`). ``asked``: the answers already
    computed for the same pool, by question (events and delta, bit for bit): the bisection's last
    feasible point, the calibration's figure and the pool's figure of its binding group are one
    question, composed once (issue 26)."""
    event = PoissonSampledSkellam(
        sampling_rate=sampling_rate, variance=variance, l2_sensitivity=l2, l1_sensitivity=l1, steps=rounds
    )
    key = (tuple(spent), event, delta)
    if asked is not None and key in asked:
        return asked[key]
    epsilon = accounting.epsilon_of_events([*spent, event], delta=delta, accountant=_CURVE_ACCOUNTANT).epsilon
    if asked is not None:
        asked[key] = epsilon
    return epsilon


@dataclass(frozen=True)
class _Member:
    """A noised group of a pool: its sampling rate, budget and clip norm, and what a re-plan's
    group already spent (docs/planning.md §9): its Skellam events under parent plans and the
    wrap-around probability those rounds charged to delta. ``start``: the group's continuous
    noise multiplier (its plan's ``noise_multiplier_required``), where pld's re-calibration at
    delta less the wrap charge starts (docs/accounting.md §13.5); None where none is known."""

    group: str
    sampling_rate: float
    epsilon: float
    clip_norm: float
    spent: tuple[PoissonSampledSkellam, ...] = ()
    spent_wrap: float = 0.0
    start: float | None = None


@dataclass(frozen=True)
class _PoolQuestion:
    """One pool's calibration: its noised member groups, and what they share (the grid, t, n, c,
    and adaptive clipping's count factor m, 0 without it).

    ``widest_clip`` is the largest clip norm of any client of the pool: b covers vectors of it."""

    pool: str
    members: tuple[_Member, ...]
    scale: float
    min_survivors: int
    max_clients: int
    colluding_clients: int
    widest_clip: float
    count_factor: int = 0

    @property
    def honest(self) -> int:
        return self.min_survivors - self.colluding_clients


@dataclass(frozen=True)
class _Run:
    """What every pool of a plan shares: its rounds, delta and model dimension, and the
    per-round wrap-around bound charged to delta (delta / (1000 rounds))."""

    rounds: int
    delta: float
    dimension: int

    @property
    def wrap_round(self) -> float:
        return self.delta / (WRAP_SHARE_OF_DELTA * self.rounds)

    @property
    def wrap_run(self) -> float:
        return self.wrap_round * self.rounds

    def mech_delta(self, member: _Member) -> float:
        """The delta ``member``'s Skellam events are accounted at: the wrap-around bound of every
        round taken off, and of every round it spent under parent plans (``spent_wrap``)."""
        return self.delta - member.spent_wrap - self.wrap_run


def _released(member: _Member, question: _PoolQuestion, run: _Run) -> tuple[float, float]:
    """``member``'s released (L2, L1) sensitivities on the pool's grid: its rounded bounds with
    the count coordinate +-m (:func:`released_sensitivities`), what its events state."""
    l2 = rounded_l2_bound(member.clip_norm, question.scale, run.dimension)
    return released_sensitivities(l2, rounded_l1_bound(l2, run.dimension), question.count_factor)


def _compared(sigma: float, member: _Member, question: _PoolQuestion) -> float:
    """The noise multiplier of the continuous Gaussian of equal noise releasing the same vector:
    its sensitivity is sqrt((C s)^2 + m^2) with the count coordinate, C s without."""
    m, cs = question.count_factor, member.clip_norm * question.scale
    return sigma * cs / math.sqrt(cs * cs + m * m) if m else sigma


def _checked_threat_model(min_survivors: int, max_clients: int, colluding_clients: int) -> None:
    """t - c honest survivors are left, and n >= t vectors are summed (InvalidInputError naming the field)."""
    t, n, c = min_survivors, max_clients, colluding_clients
    if c >= t:
        raise InvalidInputError("colluding_clients", f"must be below min_survivors ({t}): no honest noise is left")
    if n < t:
        raise InvalidInputError("max_clients", f"must be at least min_survivors ({t})")


def calibrate_skellam(
    *,
    sampling_rate: float,
    rounds: int,
    epsilon: float,
    delta: float,
    clip_norm: float,
    dimension: int,
    min_survivors: int,
    max_clients: int,
    colluding_clients: int = 0,
    scale: float | None = None,
    accountant: AccountantName = DEFAULT_ACCOUNTANT,
    count_factor: int = 0,
    spent: Sequence[PoissonSampledSkellam] = (),
    spent_wrap: float = 0.0,
) -> DiscreteMechanism:
    """The least Skellam noise meeting (epsilon, delta) with t - c honest survivors, and its b.

    docs/secure-aggregation.md §Discrete noise, "Calibration". The total variance mu is the
    least whose epsilon of ``rounds`` Poisson-subsampled Skellam releases at delta - rounds * w
    is <= ``epsilon``, w = delta / (1000 rounds) the per-round wrap-around bound, under
    :func:`calibration_accountant` of ``accountant``: pld (the tight route, :func:`_tight`) or
    rdp (:func:`_rdp_calibration`). Each client's share is mu / (t - c). The bit width b is
    the smallest with wrap_probability <= w for ``max_clients`` summed vectors. With
    ``count_factor`` m > 0 (adaptive clipping) the released vector also carries the count
    coordinate +-m: the event's sensitivities are :func:`released_sensitivities` and b covers
    that coordinate too.

    A re-plan (docs/planning.md §9) passes the Skellam events its group already ``spent``
    and the wrap-around probability ``spent_wrap`` those rounds charged to delta: the
    epsilon is then of the spent events composed with the new rounds, at delta less both
    wrap charges, and the block's ``epsilon`` is that composed figure (its overhead figures
    compare this plan's own rounds alone).
    """
    q = validate_sampling_rate(sampling_rate)
    steps = validate_count("rounds", rounds)
    target = validate_positive("epsilon", epsilon)
    delta = validate_delta(delta)
    clip = validate_positive("clip_norm", clip_norm)
    d = validate_count("dimension", dimension)
    t = validate_count("min_survivors", min_survivors)
    n = validate_count("max_clients", max_clients)
    c = validate_count("colluding_clients", colluding_clients, minimum=0)
    _checked_threat_model(t, n, c)
    route = calibration_accountant(get_accountant(accountant).name)
    s = choose_scale(clip, d) if scale is None else validate_positive("scale", scale)
    m = validate_count("count_factor", count_factor, minimum=0)
    if not 0.0 <= spent_wrap < delta / 2.0:
        raise InvalidInputError("spent_wrap", f"must be from 0 to below half of delta ({delta:g})")
    run = _Run(steps, delta, d)
    member = _Member("group", q, target, clip, tuple(spent), spent_wrap)
    question = _PoolQuestion("pool", (member,), s, t, n, c, clip, m)
    if route == RDP_ACCOUNTANT:
        return _rdp_calibration(member, question, run)
    return _tight([question], run)[0].mechanism


def _rdp_calibration(
    member: _Member, question: _PoolQuestion, run: _Run, asked: _Asked | None = None
) -> DiscreteMechanism:
    """The rdp route (docs/secure-aggregation.md §Discrete noise, "Calibration"): a bisection on
    log sigma, sigma = sqrt(mu) / (C s), of the rdp epsilon (Zhu and Wang's general bound) of the
    member's spent events and the new rounds to a relative 1e-4, the returned sigma an evaluated
    feasible point; b for the member's own clip. ``asked``: the pool's epsilons already computed
    (:func:`_skellam_epsilon`)."""
    q, steps, target, clip = member.sampling_rate, run.rounds, member.epsilon, member.clip_norm
    delta, d, s = run.delta, run.dimension, question.scale
    t, n, c, m = question.min_survivors, question.max_clients, question.colluding_clients, question.count_factor
    l2, l1 = _released(member, question, run)
    spent = list(member.spent)
    wrap_round = run.wrap_round
    mech_delta = run.mech_delta(member)

    def eps_at(log_sigma: float) -> float:
        return _skellam_epsilon(q, (math.exp(log_sigma) * clip * s) ** 2, l2, l1, steps, mech_delta, spent, asked)

    lo, hi = math.log(1e-3), math.log(1e4)
    if eps_at(hi) > target:
        raise InfeasibleError(f"no Skellam noise up to 1e4 C s meets epsilon {target:g} at delta {delta:g}")
    if eps_at(lo) <= target:
        hi = lo
    while hi - lo > 1e-4:
        mid = 0.5 * (lo + hi)
        if eps_at(mid) <= target:
            hi = mid
        else:
            lo = mid
    sigma = math.exp(hi)
    total = (sigma * clip * s) ** 2
    honest = t - c
    share = total / honest
    bits, _ = bits_for(wrap_round, n, clip, s, d, share, m)
    eps = _skellam_epsilon(q, share * honest, l2, l1, steps, mech_delta, spent, asked)
    own = _skellam_epsilon(q, share * honest, l2, l1, steps, mech_delta, asked=asked) if spent else eps
    compared = _compared(sigma, member, question)
    same_bound = gaussian_epsilon_same_bound(q, compared, steps, mech_delta)
    gaussian = PoissonSampledGaussian(sampling_rate=q, noise_multiplier=compared, steps=steps)
    continuous = accounting.epsilon_of_events([gaussian], delta=delta, accountant=_CURVE_ACCOUNTANT).epsilon
    return _block(
        member, question, run, RDP_ACCOUNTANT, share=share, bits=bits, sigma=sigma, epsilon=eps, own=own,
        same_bound=same_bound, continuous=continuous,
    )


def _block(
    member: _Member,
    question: _PoolQuestion,
    run: _Run,
    accountant: AccountantName,
    *,
    share: float,
    bits: int,
    sigma: float,
    epsilon: float,
    own: float,
    same_bound: float,
    continuous: float,
) -> DiscreteMechanism:
    """The DiscreteMechanism of ``member``'s calibration on its pool's grid: ``epsilon`` that of
    its spent events and the plan's rounds, ``own`` the plan's rounds alone (what the overheads
    compare with the Gaussians of equal noise)."""
    d, s, m = run.dimension, question.scale, question.count_factor
    l2 = rounded_l2_bound(member.clip_norm, s, d)
    return DiscreteMechanism(
        accountant=accountant,
        clip_norm=member.clip_norm,
        dimension=d,
        padded_dimension=padded_dimension(d),
        scale=s,
        gamma=1.0 / s,
        rounding_beta=ROUNDING_BETA,
        l2_sensitivity=l2,
        l1_sensitivity=rounded_l1_bound(l2, d),
        min_survivors=question.min_survivors,
        colluding_clients=question.colluding_clients,
        honest_survivors=question.honest,
        total_variance=share * question.honest,
        share_variance=share,
        equivalent_noise_multiplier=sigma,
        max_clients=question.max_clients,
        bits=bits,
        wrap_probability_per_round=run.wrap_round,
        wrap_probability_run=run.wrap_run,
        sampling_rate=member.sampling_rate,
        rounds=run.rounds,
        delta=run.delta,
        epsilon=epsilon,
        gaussian_epsilon_same_bound=same_bound,
        discretisation_overhead=_overhead(own, same_bound),
        gaussian_epsilon=continuous,
        overhead_vs_continuous=_overhead(own, continuous),
        threat_model=threat_model_line(question.min_survivors, question.colluding_clients),
        count_factor=m,
        count_noise_std=count_std(share * question.honest, m),
    )


def _overhead(epsilon: float, gaussian: float) -> float:
    """epsilon / gaussian - 1; 0 where both are 0 (pld states 0 for a release far below its
    grid: a tiny sampling rate under a large noise), and a large finite ratio (the JSON number
    stays finite) where only the Gaussian's is 0."""
    if gaussian > 0:
        return epsilon / gaussian - 1.0
    return 0.0 if epsilon <= 0 else min(epsilon / 1e-300, 1e300)


def _shared(variance: float, honest: int) -> float:
    """The total variance the clients' shares give: (variance / honest) * honest, the product
    every reader of a block computes (``DiscreteMechanism.event``, ``group_event``)."""
    return (variance / honest) * honest


def _variance_meeting(need: float, honest: int) -> float:
    """The least total variance mu (on the shares' grid of ``honest`` survivors) whose dominating
    Gaussian has noise std 1/m1 >= ``need`` in grid units (docs/accounting.md §11.7).

    m1 is the central step 2 Z(0) raised by DOMINATION_MARGIN, and central_step(mu) sqrt(mu) is
    about 1 + 1/(6 mu), nearly constant: a few fixed-point steps mu = (need m1(mu) sqrt(mu))^2
    on the exact central step give mu (its square root raised by a relative 1e-9, so that the
    table's other steps, equal to it up to their rounding, stay below), then ONE table
    (``unit_shift_table``) checks every step, and raises mu by the ratio it misses by if
    any does. Above MAX_TABULATED_VARIANCE the first estimate is returned unchecked (the
    caller calibrates that pool by rdp).
    """
    target = 1.0 / (need * (1.0 + _SQRT_MU_SAFETY))  # the largest m1 allowed, with the safety
    mu = need * need
    for _ in range(4):
        mu = (central_step(mu) * (1.0 + DOMINATION_MARGIN) * math.sqrt(mu) / target) ** 2
    mu = _shared(mu, honest)
    for _ in range(8):
        if mu > MAX_TABULATED_VARIANCE:
            return mu
        try:
            m1 = unit_shift_table(mu)[0]
        except ArithmeticError:  # next to no noise: far below what any budget needs
            mu = _shared(4.0 * mu + 1.0, honest)
            continue
        if m1 * need <= 1.0:
            return mu
        mu = _shared(mu * (m1 * need) ** 2 * (1.0 + _SQRT_MU_SAFETY), honest)
    raise InfeasibleError(f"no Skellam variance found whose dominating Gaussian has noise std {need:g}")


def _tight(questions: list[_PoolQuestion], run: _Run, deadline: float | None = None) -> list[PoolDiscrete]:
    """The tight route (docs/secure-aggregation.md §Discrete noise, "Calibration"; docs/accounting.md
    §11.7): every pool's least Skellam variance under pld, certified by pld.

    1. Each member group's Gaussian noise multiplier sigma*_g meeting its budget at delta' =
       delta - T w (less ``spent_wrap``, a re-plan's earlier wrap charges) composed after the
       Skellam events it already spent (pld composes each through its dominating Gaussian):
       pld's calibration with that spent history, every group of every pool in one lockstep
       call (§13.7).
    2. The pool's need is max_g sigma*_g D2_g (D2_g its group's released L2 bound on the pool's
       grid, the count coordinate included under adaptive clipping): the dominating Gaussian's
       noise std 1/m1 must reach it (:func:`_variance_meeting`, one ``unit_shift_table``), so
       that 1/(m1 D2_g) >= sigma*_g for every member.
    3. pld's epsilon of each member's spent events then its Poisson-subsampled Skellam event at
       delta' (the figure of record: pld composes each Skellam event at its tail mass eta) is
       checked against its budget, all at once (§13.6); a pool that misses one (pld's grid is
       not monotone in sigma to the last digit, or eta is not negligible) is raised by a
       relative 1e-6, quadrupled at each further miss.
    A pool whose variance would exceed MAX_TABULATED_VARIANCE (pld answers such events by rdp)
    is calibrated by the rdp route instead, its block saying so. The overheads compare the
    plan's own rounds alone (no spent events) with the continuous Gaussian of equal noise.
    """
    keys = [(i, m) for i, question in enumerate(questions) for m in question.members]
    # each search starts from its group's continuous answer where the plan states it: the
    # question differs only by the wrap charge taken from delta, so one round of two evaluations
    # usually proves the answer (docs/accounting.md §13.5); the start is part of the plan, so
    # the planner and every process deriving the blocks from the plan ask the same searches
    answers = accounting.noise_multipliers(
        [(m.sampling_rate, run.rounds, m.epsilon, run.mech_delta(m)) for _, m in keys],
        TIGHT_ACCOUNTANT,
        spent=[list(m.spent) for _, m in keys],
        starts=[m.start for _, m in keys],
    )
    sigma: dict[tuple[int, str], float] = {}
    for (i, m), answer in zip(keys, answers, strict=True):
        if isinstance(answer, InfeasibleError):
            raise answer
        sigma[(i, m.group)] = answer.noise_multiplier

    binding: list[_Member] = []
    variance: dict[int, float] = {}
    by_rdp: dict[int, PoolDiscrete] = {}
    for i, question in enumerate(questions):
        if deadline is not None and time.monotonic() > deadline:
            raise DiscreteReportTimeout(f"stopped with {i} of {len(questions)} pool(s) calibrated")
        needs = {m.group: sigma[(i, m.group)] * _released(m, question, run)[0] for m in question.members}
        member = max(question.members, key=lambda m: needs[m.group])
        binding.append(member)
        mu = _variance_meeting(needs[member.group], question.honest)
        if mu > MAX_TABULATED_VARIANCE:
            by_rdp[i] = _rdp_pool(question, run, deadline)
        else:
            variance[i] = mu
            # step 3 reads each member's dominating Gaussian off this table: read now, while
            # unit_shift_table still holds it (it keeps 64), the answers are kept
            # (gaussian_domination's cache) and the table is computed once per pool, not again
            # for the certification after the other pools' tables pushed it out (issue 26)
            for m in question.members:
                _event(m, question, run, mu).dominating_gaussian()

    def sigma_eq(i: int) -> float:
        """The pool's noise std in units of the binding group's C s (equivalent_noise_multiplier)."""
        return math.sqrt(variance[i]) / (binding[i].clip_norm * questions[i].scale)

    def equal_noise(i: int) -> PoissonSampledGaussian:
        """The continuous Gaussian of the pool's noise releasing the same vector, at the binding rate."""
        compared = _compared(sigma_eq(i), binding[i], questions[i])
        return PoissonSampledGaussian(sampling_rate=binding[i].sampling_rate, noise_multiplier=compared, steps=run.rounds)

    # pld's certification of every member (its spent events composed first), and the Gaussian of
    # equal noise at the binding member's delta, composed together (§13.6); a pool that misses a
    # budget is raised and asked again
    certified: dict[tuple[int, str], float] = {}
    same_bound: dict[int, float] = {}
    pending = sorted(variance)
    raises = dict.fromkeys(pending, 0)
    while pending:
        asked = [(i, m) for i in pending for m in questions[i].members]
        histories: list[tuple[Sequence[PoissonSampledGaussian | PoissonSampledSkellam], float]] = [
            ([*m.spent, _event(m, questions[i], run, variance[i])], run.mech_delta(m)) for i, m in asked
        ]
        epsilons = _pld_epsilons([*histories, *(([equal_noise(i)], run.mech_delta(binding[i])) for i in pending)])
        missed: set[int] = set()
        for (i, m), epsilon in zip(asked, epsilons, strict=False):
            certified[(i, m.group)] = epsilon
            if not epsilon <= m.epsilon:
                missed.add(i)
        for i, epsilon in zip(pending, epsilons[len(asked):], strict=True):
            same_bound[i] = epsilon
        for i in missed:
            if raises[i] == _RAISES:
                raise InfeasibleError(
                    f"pool {questions[i].pool}: pld's epsilon of the Skellam noise still misses a budget after "
                    f"{_RAISES} raises of its variance"
                )
            variance[i] = _shared(variance[i] * (1.0 + _RAISE_STEP * 4.0 ** raises[i]), questions[i].honest)
            raises[i] += 1
        pending = sorted(missed)

    # the continuous Gaussian of equal noise at the plan's delta: what overhead_vs_continuous compares
    # with; and, for a binding member with spent events, the plan's own rounds alone
    tight = sorted(variance)
    with_spent = [i for i in tight if binding[i].spent]
    compared = _pld_epsilons([
        *(([equal_noise(i)], run.delta) for i in tight),
        *(([_event(binding[i], questions[i], run, variance[i])], run.mech_delta(binding[i])) for i in with_spent),
    ])
    continuous = dict(zip(tight, compared[: len(tight)], strict=True))
    own = dict(zip(with_spent, compared[len(tight):], strict=True))
    found: dict[int, PoolDiscrete] = {}
    for i in tight:
        question, member = questions[i], binding[i]
        share = variance[i] / question.honest
        bits, _ = bits_for(
            run.wrap_round, question.max_clients, question.widest_clip, question.scale, run.dimension, share,
            question.count_factor,
        )
        block = _block(
            member, question, run, TIGHT_ACCOUNTANT, share=share, bits=bits, sigma=sigma_eq(i),
            epsilon=certified[(i, member.group)], own=own.get(i, certified[(i, member.group)]),
            same_bound=same_bound[i], continuous=continuous[i],
        )
        found[i] = PoolDiscrete(
            pool=question.pool, binding_group=member.group, mechanism=block,
            group_epsilons={m.group: certified[(i, m.group)] for m in question.members},
        )
    for i, pool in by_rdp.items():
        found[i] = pool
    return [found[i] for i in range(len(questions))]


def _pld_epsilons(
    asked: Sequence[tuple[Sequence[PoissonSampledGaussian | PoissonSampledSkellam], float]],
) -> list[float]:
    """The tight accountant's epsilon of every (history, delta) of ``asked``, in order: one composing call per
    distinct delta (a re-plan's groups have their own; a fresh plan's share one)."""
    by_delta: dict[float, list[int]] = {}
    for k, (_, delta) in enumerate(asked):
        by_delta.setdefault(delta, []).append(k)
    out = [0.0] * len(asked)
    for delta, ks in by_delta.items():
        reports = accounting.epsilons_of_histories([asked[k][0] for k in ks], delta, TIGHT_ACCOUNTANT)
        for k, report in zip(ks, reports, strict=True):
            out[k] = float(report.epsilon)
    return out


def _event(member: _Member, question: _PoolQuestion, run: _Run, variance: float) -> PoissonSampledSkellam:
    """``run.rounds`` rounds of the pool's Skellam noise of total ``variance`` for ``member``
    (its own clip norm on the pool's grid, the count coordinate added), as ``group_event`` states them."""
    l2, l1 = _released(member, question, run)
    return PoissonSampledSkellam(
        sampling_rate=member.sampling_rate,
        variance=variance,
        l2_sensitivity=l2,
        l1_sensitivity=l1,
        steps=run.rounds,
    )


class PoolDiscrete(NumbersModel):
    """A pool's discrete mechanism for a client-level plan: the noise its strictest group needs."""

    pool: str
    binding_group: str = Field(description="the member group whose budget needs the most noise")
    mechanism: DiscreteMechanism = Field(description="calibrated for the binding group")
    group_epsilons: dict[str, float] = Field(
        description="each member group's epsilon at the pool's noise and bit width (the block's accountant)"
    )


class DiscreteReportTimeout(InfeasibleError):
    """The discrete calibration ran out of its time limit (the plan is kept without the blocks)."""


# The discrete calibration must never make a planning request slow: a pool takes tens of
# milliseconds by the tight route, about 0.15 s per group by the rdp route.
DISCRETE_REPORT_TIME_LIMIT_S = 10.0


def _rdp_pool(question: _PoolQuestion, run: _Run, deadline: float | None) -> PoolDiscrete:
    """The rdp route for one pool: each member calibrated alone on the pool's grid, the largest
    total variance kept, b for the pool's widest clip norm, every member's rdp epsilon at it
    (its spent events composed first, at delta less its spent wrap charge)."""
    options: dict[str, DiscreteMechanism] = {}
    asked: _Asked = {}
    for m in question.members:
        if deadline is not None and time.monotonic() > deadline:
            raise DiscreteReportTimeout(f"stopped in pool {question.pool} (the rdp route calibrates group by group)")
        options[m.group] = _rdp_calibration(m, question, run, asked)
    binding = max(options, key=lambda gid: options[gid].total_variance)
    # The binding group's b covers vectors of its own clip norm only; every client of the
    # pool sends on this grid (idp_scale and per-group clip norms give some a larger C_g), so
    # b must keep the wrap-around charged to delta for the largest of them.
    chosen = options[binding]
    bits, _ = bits_for(
        chosen.wrap_probability_per_round, chosen.max_clients, question.widest_clip, question.scale,
        run.dimension, chosen.share_variance, question.count_factor,
    )
    chosen = chosen.model_copy(update={"bits": max(bits, chosen.bits)})
    epsilons = {
        m.group: _skellam_epsilon(
            m.sampling_rate,
            chosen.total_variance,
            options[m.group].released_l2_sensitivity,
            options[m.group].released_l1_sensitivity,
            run.rounds,
            run.delta - m.spent_wrap - chosen.wrap_probability_run,
            m.spent,
            asked,
        )
        for m in question.members
    }
    return PoolDiscrete(pool=question.pool, binding_group=binding, mechanism=chosen, group_epsilons=epsilons)


def pool_mechanisms(
    plan: Plan, colluding_clients: int = 0, time_limit_s: float | None = None
) -> list[PoolDiscrete]:
    """The discrete mechanism of every noised pool of ``plan`` (docs/secure-aggregation.md §Discrete noise).

    One grid per pool (the scale s of its smallest clip norm), one Skellam noise for
    all its groups: the least total variance meeting every member group's budget at its own
    sampling rate, clip norm and epsilon, with t = the pool's secure-aggregation
    threshold and c = ``colluding_clients``, calibrated by :func:`calibration_accountant` of
    the plan's accountant (pld: :func:`_tight`, all pools together; rdp: group by group,
    :func:`_rdp_pool`); b covers all the pool's clients at the largest clip norm of any of its
    groups (the block's ``clip_norm`` is the binding group's). The dimension is the whole
    model's (a sparsified pool sends fewer coordinates, which only lowers its rounding
    bound). A re-plan's member group composes its spent Skellam events (``spent_discrete``)
    with the plan's rounds, at delta less its spent wrap-around charge too (docs/planning.md
    §9); a member whose spent phases no Skellam events record (the re-plan of a continuous
    run) is refused. A plan with an ``adaptive_clip`` block gets each noised pool's count
    coordinate: ``count_factor`` m from the pool's z_eff and the scenario's sigma_b
    (:func:`count_factor_for` at the pool's grid and smallest clip norm; adaptive clipping
    clips every client at one norm), the same m for every member group. With ``time_limit_s``,
    DiscreteReportTimeout once that many seconds have passed before a pool's (rdp: a group's)
    calibration.
    """
    c = validate_count("colluding_clients", colluding_clients, minimum=0)
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    run = _Run(plan.rounds, plan.scenario.delta, plan.scenario.model_dim)
    questions: list[_PoolQuestion] = []
    for pool in plan.pools:
        members = [g for g in plan.groups if g.pool == pool.id and g.epsilon is not None and g.sampling_rate > 0]
        if pool.noise_multiplier <= 0 or not members:
            continue
        for g in members:
            if not spent_as_discrete(g):
                raise InvalidInputError(
                    f"groups.{g.id}.spent_discrete",
                    f"pool {pool.id}'s group {g.id} has spent continuous Gaussian phases that no Skellam events "
                    "record (a re-plan of a run on the continuous mechanism): its discrete noise cannot be "
                    "composed with that history",
                )
        t = pool.secagg_threshold
        n = max(sum(g.num_clients for g in plan.groups if g.pool == pool.id), t)
        _checked_threat_model(t, n, c)
        smallest_clip = min(g.clip_norm for g in members)
        scale = choose_scale(smallest_clip, run.dimension)
        questions.append(_PoolQuestion(
            pool=pool.id,
            members=tuple(
                _Member(
                    g.id, g.sampling_rate, float(g.epsilon), g.clip_norm,  # type: ignore[arg-type]
                    tuple(g.spent_discrete), g.spent_wrap_probability, _start(g.noise_multiplier_required),
                )
                for g in members
            ),
            scale=scale,
            min_survivors=t,
            max_clients=n,
            colluding_clients=c,
            widest_clip=widest_clip(plan, pool.id),
            count_factor=_count_factor(
                plan, float(pool.noise_multiplier), rounded_l2_bound(smallest_clip, scale, run.dimension)
            ),
        ))
    if calibration_accountant(plan.scenario.accountant) == RDP_ACCOUNTANT:
        return [_rdp_pool(question, run, deadline) for question in questions]
    return _tight(questions, run, deadline)


def _start(sigma: float | None) -> float | None:
    """A stated continuous noise multiplier as a search start (a hand-edited plan's 0, NaN or
    infinity is none: the search then starts from its own guess, with the same answer)."""
    return sigma if sigma is not None and math.isfinite(sigma) and sigma > 0 else None


def _count_factor(plan: Plan, noise_multiplier: float, l2_bound: float) -> int:
    """The pool's count factor m: 0 without adaptive clipping, else :func:`count_factor_for`
    at sigma_b re-derived from the scenario's block (``planner.adaptive_clip.count_noise_std``)."""
    settings = plan.scenario.adaptive_clip
    if settings is None:
        return 0
    from planner.adaptive_clip import count_noise_std

    return count_factor_for(l2_bound, noise_multiplier, count_noise_std(settings, plan.scenario))


def with_blocks(plan: Plan) -> tuple[Plan, dict[str, float]]:
    """``plan`` with each noised pool's ``discrete`` block when its scenario's mechanism is skellam
    (the default, ``secagg_mechanism``; ``report_discrete: true`` is its old spelling), and
    each member group's epsilon its block was certified at, where that is the figure of
    record a run's ledger computes from the same events (the block's accountant is
    :func:`calibration_accountant` of the plan's: not a pool of a pld plan that the rdp
    route calibrated).

    The groups' figures stay the continuous mechanism's here: ``planner.finalize.with_discrete``
    states the Skellam mechanism's (docs/secure-aggregation.md §Discrete noise, "What the plan
    states"). ``colluding_clients`` comes from the scenario. A re-plan's blocks compose its
    groups' spent Skellam events (docs/planning.md §9). A plan whose blocks cannot be
    calibrated (spent phases that no Skellam events record: the re-plan of a continuous run;
    no bit width; the time limit) keeps none and says why in ``warnings``;
    ``report_discrete: false`` is warned about (it no longer selects the continuous Gaussian).
    """
    if plan.scenario.mechanism != "skellam":
        return plan, {}
    notes = []
    if plan.scenario.report_discrete is False:
        notes.append(
            "report_discrete: false no longer selects the continuous Gaussian: the pools carry the distributed "
            "Skellam mechanism (the default); name secagg_mechanism: gaussian_continuous for the continuous one"
        )
    try:
        found = pool_mechanisms(plan, plan.scenario.colluding_clients, DISCRETE_REPORT_TIME_LIMIT_S)
    except (InvalidInputError, InfeasibleError) as error:
        notes.append(
            f"secagg_mechanism skellam: {error}; no discrete block, so the pools can run only the continuous "
            "Gaussian (secagg_mechanism: gaussian_continuous)"
        )
        return plan.model_copy(update={"warnings": [*plan.warnings, *notes]}), {}
    pools = {p.pool: p.mechanism for p in found}
    record = calibration_accountant(plan.scenario.accountant)
    certified = {
        group: epsilon for p in found if p.mechanism.accountant == record for group, epsilon in p.group_epsilons.items()
    }
    updated = [pool.model_copy(update={"discrete": pools.get(pool.id)}) for pool in plan.pools]
    return plan.model_copy(update={"pools": updated, "warnings": [*plan.warnings, *notes]}), certified


def group_event(plan: Plan, group: GroupPlan, steps: int) -> PoissonSampledSkellam | None:
    """What ``steps`` rounds of the discrete mechanism spend for ``group``: the Poisson(q_g)-subsampled
    Skellam event of its pool's stated block (docs/secure-aggregation.md §Discrete noise).

    The pool's total variance mu = share_variance (t - c); the sensitivities are the group's own
    (its clip norm C_g on the pool's grid), as ``pool_mechanisms`` computes each group's epsilon,
    with the block's count coordinate m added (:func:`released_sensitivities`) under adaptive clipping.
    ``None`` when nothing is spent: no block, no rounds, or a group not sampled.
    """
    mechanism = plan.pool(group.pool).discrete
    if mechanism is None or steps <= 0 or group.sampling_rate <= 0:
        return None
    rounded = rounded_l2_bound(group.clip_norm, mechanism.scale, mechanism.dimension)
    l2, l1 = released_sensitivities(rounded, rounded_l1_bound(rounded, mechanism.dimension), mechanism.count_factor)
    return PoissonSampledSkellam(
        sampling_rate=group.sampling_rate,
        variance=mechanism.share_variance * mechanism.honest_survivors,
        l2_sensitivity=l2,
        l1_sensitivity=l1,
        steps=steps,
    )


def run_delta(plan: Plan, group: GroupPlan, rounds_run: int) -> float:
    """The delta ``group``'s discrete event is accounted at after ``rounds_run`` rounds: the plan's
    delta less the wrap-around bound of each round run (docs/secure-aggregation.md §Discrete
    noise, proof step 4) and less what the group's spent rounds under parent plans charged
    (``spent_wrap_probability``, docs/planning.md §9); without a block in its pool, the plan's
    delta less that spent charge."""
    mechanism = plan.pool(group.pool).discrete
    spent = float(plan.scenario.delta) - group.spent_wrap_probability
    if mechanism is None:
        return spent
    return spent - rounds_run * mechanism.wrap_probability_per_round


def spent_as_discrete(group: GroupPlan) -> bool:
    """Whether ``group``'s spent history under parent plans is recorded as Skellam events: as many
    rounds in ``spent_discrete`` as in its noised spent phases (none in a plan without parents).
    A re-plan of a continuous run records phases only, so its groups answer False."""
    phases = sum(p.steps for p in group.phases[: group.spent_phase_count] if p.noise_multiplier > 0)
    return phases == sum(e.steps for e in group.spent_discrete)


def group_history(plan: Plan, group: GroupPlan, rounds_run: int) -> list[PoissonSampledSkellam]:
    """What a run on the discrete mechanism has spent for ``group`` after ``rounds_run`` rounds of
    ``plan``: the Skellam events of its parents (``spent_discrete``), then :func:`group_event`
    of the rounds run (docs/planning.md §9); accounted at :func:`run_delta`."""
    event = group_event(plan, group, rounds_run)
    return [*group.spent_discrete, *([] if event is None else [event])]


def counts_discrete(plan: Plan, group: GroupPlan) -> bool:
    """Whether a skellam run prices ``group`` by its Skellam events (:func:`group_history`): its
    pool states a block, or it spent Skellam events under a parent (an exhausted or removed
    group of a re-plan, sampled at rate 0 now, keeps that history)."""
    return plan.pool(group.pool).discrete is not None or bool(group.spent_discrete)


def spent_record(plan: Plan, group: GroupPlan, rounds_run: int) -> tuple[list[PoissonSampledSkellam], float] | None:
    """What a re-plan after ``rounds_run`` rounds of ``plan`` records as ``group``'s spent history when
    ``plan``'s run executes the discrete mechanism (docs/planning.md §9): its Skellam events
    (:func:`group_history`) and the wrap-around probability charged to delta so far (delta less
    :func:`run_delta`). ``None`` when ``plan``'s mechanism is not skellam (``scenario.mechanism``:
    its run is continuous), when the group's own spent history is not recorded as Skellam events,
    or when it was sampled with noise in a pool that states no block (rounds no Skellam event
    records). A skellam plan without any block (every group exhausted: no noised pool) still
    records its groups' spent Skellam events: the mechanism is the plan's, not "has blocks"."""
    if plan.scenario.mechanism != "skellam" or not spent_as_discrete(group):
        return None
    pool = plan.pool(group.pool)
    if pool.discrete is None and pool.noise_multiplier > 0 and group.sampling_rate > 0 and rounds_run > 0:
        return None
    return group_history(plan, group, rounds_run), float(plan.scenario.delta) - run_delta(plan, group, rounds_run)
