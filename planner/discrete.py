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
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

import accounting
from accounting import rdp as rdp_math
from accounting.accountants import ACCOUNTANTS, DEFAULT_ACCOUNTANT
from accounting.errors import InfeasibleError, InvalidInputError
from accounting.events import PoissonSampledGaussian, PoissonSampledSkellam
from accounting.events.poisson_sampled_skellam import subsampled_rdp
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
# The accountant the discrete mechanism is calibrated and compared with: the registry's fast,
# sound per-round stand-in, which composes every (epsilon, delta) event through its RDP curve
# (the Skellam event has no other representation yet, docs/accounting.md §11.6).
_CURVE_ACCOUNTANT = ACCOUNTANTS[DEFAULT_ACCOUNTANT].per_round


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
    coordinates and the two tails, minimised over the split of a and k. With adaptive
    clipping's count coordinate (``count_factor`` m > 0: each client adds +-m, unrotated)
    one more coordinate: |sum| <= n m plus its Skellam noise, so the union adds
    P(|Z| >= 2^(b-1) - 1 - n m).
    """
    n, dp = int(clients), padded_dimension(dimension)
    room = 2.0 ** (bits - 1) - 1.0 - n
    if room <= 0:
        return 1.0
    signal = n * clip_norm * scale
    variance = n * share_variance
    best = 1.0
    for fraction in np.linspace(0.0, 1.0, 201)[1:-1]:
        a, k = room * fraction, room * (1.0 - fraction)
        rotated = 2.0 * math.exp(-a * a * dp / (2.0 * signal * signal)) if signal > 0 else 0.0
        best = min(best, dp * (rotated + skellam_tail(variance, k)))
    if count_factor:
        count_room = 2.0 ** (bits - 1) - 1.0 - n * count_factor
        best += skellam_tail(variance, count_room) if count_room > 0 else 1.0
    return min(1.0, best)


def bits_for(
    bound: float, clients: int, clip_norm: float, scale: float, dimension: int, share_variance: float,
    count_factor: int = 0,
) -> tuple[int, float]:
    """The smallest b whose :func:`wrap_probability` is <= ``bound``, with that probability."""
    for bits in range(2, MAX_BITS + 1):
        chance = wrap_probability(bits, clients, clip_norm, scale, dimension, share_variance, count_factor)
        if chance <= bound:
            return bits, chance
    raise InfeasibleError(f"no bit width up to {MAX_BITS} keeps the wrap-around probability below {bound:g}")


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
    ceilings = np.maximum(np.ceil(grid.orders).astype(int), 2)
    top = int(ceilings.max())
    base = np.arange(top + 1, dtype=float) / (2.0 * noise_multiplier**2)
    values = {a: subsampled_rdp(a, sampling_rate, base) for a in np.unique(ceilings).tolist()}
    curve = rounds * np.array([values[a] for a in ceilings.tolist()])
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


def _skellam_epsilon(
    sampling_rate: float, variance: float, l2: float, l1: float, rounds: int, delta: float,
    spent: Sequence[PoissonSampledSkellam] = (),
) -> float:
    """Epsilon of ``spent`` then ``rounds`` releases of this Skellam event, composed at ``delta``."""
    event = PoissonSampledSkellam(
        sampling_rate=sampling_rate, variance=variance, l2_sensitivity=l2, l1_sensitivity=l1, steps=rounds
    )
    return accounting.epsilon_of_events([*spent, event], delta=delta, accountant=_CURVE_ACCOUNTANT).epsilon


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
    count_factor: int = 0,
    spent: Sequence[PoissonSampledSkellam] = (),
    spent_wrap: float = 0.0,
) -> DiscreteMechanism:
    """The least Skellam noise meeting (epsilon, delta) with t - c honest survivors, and its b.

    The total variance mu is the smallest (relative tolerance 1e-4; the returned one is an
    evaluated feasible point) whose rdp epsilon of ``rounds`` Poisson-subsampled Skellam
    releases at delta - rounds * w is <= ``epsilon``, w = delta / (1000 rounds) the
    per-round wrap-around bound; each client's share is mu / (t - c). The bit width b is
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
    if c >= t:
        raise InvalidInputError("colluding_clients", f"must be below min_survivors ({t}): no honest noise is left")
    if n < t:
        raise InvalidInputError("max_clients", f"must be at least min_survivors ({t})")
    s = choose_scale(clip, d) if scale is None else validate_positive("scale", scale)
    m = validate_count("count_factor", count_factor, minimum=0)
    rounded_l2 = rounded_l2_bound(clip, s, d)
    rounded_l1 = rounded_l1_bound(rounded_l2, d)
    l2, l1 = released_sensitivities(rounded_l2, rounded_l1, m)
    spent = list(spent)
    if not 0.0 <= spent_wrap < delta / 2.0:
        raise InvalidInputError("spent_wrap", f"must be from 0 to below half of delta ({delta:g})")
    wrap_round = delta / (WRAP_SHARE_OF_DELTA * steps)
    wrap_run = wrap_round * steps
    mech_delta = delta - spent_wrap - wrap_run

    def eps_at(log_sigma: float) -> float:
        return _skellam_epsilon(q, (math.exp(log_sigma) * clip * s) ** 2, l2, l1, steps, mech_delta, spent)

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
    eps = _skellam_epsilon(q, share * honest, l2, l1, steps, mech_delta, spent)
    own = _skellam_epsilon(q, share * honest, l2, l1, steps, mech_delta) if spent else eps
    # the continuous Gaussian of equal noise releases the same vector: its sensitivity is
    # sqrt((C s)^2 + m^2) with the count coordinate, C s without
    compared = sigma * clip * s / math.sqrt((clip * s) ** 2 + m * m) if m else sigma
    same_bound = gaussian_epsilon_same_bound(q, compared, steps, mech_delta)
    gaussian = PoissonSampledGaussian(sampling_rate=q, noise_multiplier=compared, steps=steps)
    continuous = accounting.epsilon_of_events([gaussian], delta=delta, accountant=_CURVE_ACCOUNTANT).epsilon
    return DiscreteMechanism(
        clip_norm=clip,
        dimension=d,
        padded_dimension=padded_dimension(d),
        scale=s,
        gamma=1.0 / s,
        rounding_beta=ROUNDING_BETA,
        l2_sensitivity=rounded_l2,
        l1_sensitivity=rounded_l1,
        min_survivors=t,
        colluding_clients=c,
        honest_survivors=honest,
        total_variance=share * honest,
        share_variance=share,
        equivalent_noise_multiplier=sigma,
        max_clients=n,
        bits=bits,
        wrap_probability_per_round=wrap_round,
        wrap_probability_run=wrap_run,
        sampling_rate=q,
        rounds=steps,
        delta=delta,
        epsilon=eps,
        gaussian_epsilon_same_bound=same_bound,
        discretisation_overhead=own / same_bound - 1.0,
        gaussian_epsilon=continuous,
        overhead_vs_continuous=own / continuous - 1.0,
        threat_model=threat_model_line(t, c),
        count_factor=m,
        count_noise_std=math.sqrt(share * honest) / (2.0 * m) if m else None,
    )


class PoolDiscrete(NumbersModel):
    """A pool's discrete mechanism for a client-level plan: the noise its strictest group needs."""

    pool: str
    binding_group: str = Field(description="the member group whose budget needs the most noise")
    mechanism: DiscreteMechanism = Field(description="calibrated for the binding group")
    group_epsilons: dict[str, float] = Field(
        description="each member group's epsilon at the pool's noise and bit width"
    )


class DiscreteReportTimeout(InfeasibleError):
    """``report_discrete`` ran out of its time limit (the plan is kept without the blocks)."""


# report_discrete is optional extra information, like report_prv (planner/calibration.py): it
# must never make a planning request slow. A group's calibration takes about 0.3 s.
DISCRETE_REPORT_TIME_LIMIT_S = 10.0


def pool_mechanisms(
    plan: Plan, colluding_clients: int = 0, time_limit_s: float | None = None
) -> list[PoolDiscrete]:
    """The discrete mechanism of every noised pool of ``plan`` (docs/secure-aggregation.md §Discrete noise).

    One grid per pool (the scale s of its smallest clip norm), one Skellam noise for
    all its groups: the largest total variance any member group needs at its own
    sampling rate, clip norm and epsilon, with t = the pool's secure-aggregation
    threshold and c = ``colluding_clients``; b covers all the pool's clients at the largest
    clip norm of any of its groups (the block's ``clip_norm`` is the binding group's). The
    dimension is the whole model's (a sparsified pool sends fewer coordinates, which
    only lowers its rounding bound). A re-plan's member group composes its spent Skellam
    events (``spent_discrete``) with the plan's rounds, at delta less its spent wrap-around
    charge too (docs/planning.md §9); a member whose spent phases no Skellam events record
    (the re-plan of a continuous run) is refused. With ``time_limit_s``,
    DiscreteReportTimeout once that many seconds have passed before a group's calibration.
    A plan with an ``adaptive_clip`` block gets each noised pool's count coordinate:
    ``count_factor`` m from the pool's z_eff and the scenario's sigma_b
    (:func:`count_factor_for` at the pool's grid and smallest clip norm; adaptive clipping
    clips every client at one norm), the same m for every member group.
    """
    c = validate_count("colluding_clients", colluding_clients, minimum=0)
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    done = 0
    d, delta = plan.scenario.model_dim, plan.scenario.delta
    result: list[PoolDiscrete] = []
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
        smallest_clip = min(g.clip_norm for g in members)
        scale = choose_scale(smallest_clip, d)
        m = _count_factor(plan, float(pool.noise_multiplier), rounded_l2_bound(smallest_clip, scale, d))
        clients = sum(g.num_clients for g in plan.groups if g.pool == pool.id)
        options: dict[str, DiscreteMechanism] = {}
        for g in members:
            if deadline is not None and time.monotonic() > deadline:
                raise DiscreteReportTimeout(f"stopped after {time_limit_s:g} s with {done} group(s) calibrated")
            done += 1
            options[g.id] = calibrate_skellam(
                sampling_rate=g.sampling_rate,
                rounds=plan.rounds,
                epsilon=float(g.epsilon),  # type: ignore[arg-type]
                delta=delta,
                clip_norm=g.clip_norm,
                dimension=d,
                min_survivors=pool.secagg_threshold,
                max_clients=max(clients, pool.secagg_threshold),
                colluding_clients=c,
                scale=scale,
                count_factor=m,
                spent=g.spent_discrete,
                spent_wrap=g.spent_wrap_probability,
            )
        binding = max(options, key=lambda gid: options[gid].total_variance)
        # The binding group's b covers vectors of its own clip norm only; every client of the
        # pool sends on this grid (idp_scale and per-group clip norms give some a larger C_g), so
        # b must keep the wrap-around charged to delta for the largest of them.
        widest = max(g.clip_norm for g in plan.groups if g.pool == pool.id)
        chosen = options[binding]
        bits, _ = bits_for(chosen.wrap_probability_per_round, chosen.max_clients, widest, scale, d, chosen.share_variance, m)
        chosen = chosen.model_copy(update={"bits": max(bits, chosen.bits)})
        epsilons = {
            g.id: _skellam_epsilon(
                g.sampling_rate,
                chosen.total_variance,
                options[g.id].released_l2_sensitivity,
                options[g.id].released_l1_sensitivity,
                plan.rounds,
                delta - g.spent_wrap_probability - chosen.wrap_probability_run,
                g.spent_discrete,
            )
            for g in members
        }
        result.append(PoolDiscrete(pool=pool.id, binding_group=binding, mechanism=chosen, group_epsilons=epsilons))
    return result


def _count_factor(plan: Plan, noise_multiplier: float, l2_bound: float) -> int:
    """The pool's count factor m: 0 without adaptive clipping, else :func:`count_factor_for`
    at sigma_b re-derived from the scenario's block (``planner.adaptive_clip.count_noise_std``)."""
    settings = plan.scenario.adaptive_clip
    if settings is None:
        return 0
    from planner.adaptive_clip import count_noise_std

    return count_factor_for(l2_bound, noise_multiplier, count_noise_std(settings, plan.scenario))


def with_discrete(plan: Plan) -> Plan:
    """``plan`` with each noised pool's ``discrete`` block when its scenario asks (``report_discrete``).

    The groups' phases and epsilons stay the continuous mechanism's, which the trainer runs
    by default; ``gdpfed train --secagg-mechanism skellam`` runs the blocks
    (docs/secure-aggregation.md §Discrete noise, "The trainer side"). ``colluding_clients`` comes from the scenario. A
    re-plan's blocks compose its groups' spent Skellam events (docs/planning.md §9); one whose spent
    phases no Skellam events record (the re-plan of a continuous run) keeps no block and says why in
    ``warnings``.
    """
    if not plan.scenario.report_discrete:
        return plan
    try:
        found = pool_mechanisms(plan, plan.scenario.colluding_clients, DISCRETE_REPORT_TIME_LIMIT_S)
        pools = {p.pool: p.mechanism for p in found}
    except (InvalidInputError, InfeasibleError) as error:
        return plan.model_copy(update={"warnings": [*plan.warnings, f"report_discrete: {error}; no discrete block"]})
    updated = [pool.model_copy(update={"discrete": pools.get(pool.id)}) for pool in plan.pools]
    return plan.model_copy(update={"pools": updated})


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
    :func:`run_delta`). ``None`` when ``plan`` states no discrete block (its run is continuous)
    or the group's own spent history is not recorded as Skellam events."""
    if all(pool.discrete is None for pool in plan.pools) or not spent_as_discrete(group):
        return None
    return group_history(plan, group, rounds_run), float(plan.scenario.delta) - run_delta(plan, group, rounds_run)
