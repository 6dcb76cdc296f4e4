"""Will the model learn? The plan's noise-to-signal ratio and the scale that brings it down.

docs/planning.md §13. Per round the server applies ``Delta = (1/K) sum_P top_{k_P}(S_P)``.
The noise in a released pool sum has variance ``I_P s_P^2`` per coordinate (``s_P`` the
pool's noise std, ``I_P = max(1, E[survivors] / m_P)`` its expected inflation by the
secure-aggregation threshold, docs/planning.md §6), and top-k keeps ``kappa_P d`` of its
coordinates, so the aggregated noise has norm about ``sqrt(d sum_P kappa_P I_P s_P^2) / K``.
The largest the aggregated clipped updates can be (every sampled client's update at its
group's clip norm, all aligned) is ``sum_g q_g N_g C_g / K``. Their ratio is

    rho = sqrt(d sum_P kappa_P I_P s_P^2) / sum_g q_g N_g C_g

A ratio above 1 means each round's noise is larger than the best possible signal.

``derived_clients_needed`` answers "how many clients per round (and in the population)
bring rho to a target with the same budgets and rounds": it scales every group's size and
K by one factor f (the same share of the population sampled per round) and keeps the
plan's design (rates, pools, keep ratios): a noise multiplier depends only on
``(q, T, epsilon, delta)``, so the multipliers are the plan's own at every f, and only the
signal ``sum q ceil(N f) C``, the secure-aggregation inflation ``I_P`` and (adaptive
clipping) ``sigma_Delta`` move with f. Each trial f costs a few thresholds, not a plan.
``clients_needed`` is the earlier search that *re-plans* the scaled scenario with the
same method at each trial f (about nine plans); it is kept as the reference the bench
and the tests compare with (docs/planning.md §13).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from accounting.errors import GdpfedError
from planner.adaptive_clip import DEFAULT_COUNT_NOISE_PER_CLIENT, update_noise_multiplier
from planner.schema import ClientsForNoiseToSignal, DiscreteMechanism, GroupPlan, Plan, PoolPlan, Scenario
from planner.secagg import SecaggThreshold, pool_thresholds

# The targets ``make_plan`` reports (docs/planning.md §13).
NOISE_TO_SIGNAL_TARGETS = (1.0, 0.1)
# Search resolution: the reported f is within this factor of the smallest that meets a target.
SCALE_RESOLUTION = 1.02
# Plans one target may cost (the search is a secant step on rho(f) ~ rho(1) / f, then bisection).
MAX_PLANS_PER_TARGET = 10
# Largest scaled group (the scenario schema's bound on num_clients).
MAX_GROUP_SIZE = 10**9
# The derived size is within this factor of the smallest scale whose design meets a target.
DERIVED_RESOLUTION = 1.001
# The smallest scale the derivation tries (a target the plan already meets).
SMALLEST_FACTOR = 1e-6
# Secant steps towards the crossing before bracketing (docs/planning.md §13).
SECANT_STEPS = 4


def continuous_noise_std(pool: PoolPlan) -> float:
    """The continuous Gaussian's s_P on the pool's update sum at the plan's clip norm: ``noise_std``,
    or with adaptive clipping ``sigma_Delta / z_eff`` times it (docs/planning.md §15)."""
    if pool.update_noise_multiplier is not None and pool.noise_multiplier > 0:
        return pool.noise_std * pool.update_noise_multiplier / pool.noise_multiplier
    return pool.noise_std


def skellam_noise_std(mechanism: DiscreteMechanism, threshold: int | None = None) -> float:
    """The distributed Skellam noise's s_P on the pool's update sum: ``sqrt(t v) / s`` in update
    units at the block's clip norm (docs/planning.md §13, "Noise").

    Each of the n >= t survivors adds a share of variance v (``share_variance``, grid units;
    the grid step is 1/s), so the released sum carries ``n v / s^2`` per coordinate, which is
    ``I_P s_P^2`` with ``I_P = n / t`` as for the continuous shares. The block's t - c honest
    shares alone are counted for privacy (``total_variance``); the c colluding clients' shares
    are noise too. ``threshold``: another t (a scaled population, :class:`ScaledDesign`), whose
    shares are ``total_variance / (t - c)``; ``None``: the block's own t and v.
    """
    t = mechanism.min_survivors if threshold is None else int(threshold)
    share = (
        mechanism.share_variance if t == mechanism.min_survivors
        else mechanism.total_variance / (t - mechanism.colluding_clients)
    )
    return math.sqrt(t * share) / mechanism.scale


def run_noise_std(continuous: float, skellam: float | None) -> float:
    """The s_P a pool's prediction counts: the larger of its continuous Gaussian's and, for a pool
    stating a Skellam block, that block's (docs/planning.md §13): a run of the plan adds the block's
    noise (``--secagg-mechanism plan``) or the continuous shares (``gaussian_continuous``), so
    the larger is never below what runs."""
    return continuous if skellam is None else max(continuous, skellam)


def update_noise_std(pool: PoolPlan) -> float:
    """s_P, the std of the noise the pool's mechanism adds to its update sum at the plan's clip
    norm (the one place every utility prediction reads it from, docs/planning.md §13):
    :func:`run_noise_std` of :func:`continuous_noise_std` and, with a ``discrete`` block,
    :func:`skellam_noise_std`."""
    skellam = None if pool.discrete is None else skellam_noise_std(pool.discrete)
    return run_noise_std(continuous_noise_std(pool), skellam)


def summed_noise_norm(pools: Sequence[PoolPlan], model_dim: int) -> float:
    """sqrt(d sum_P kappa_P I_P s_P^2): the kept noise of one round's pool sums (docs/planning.md §13)."""
    energy = sum(p.keep_ratio * max(1.0, p.expected_noise_inflation) * update_noise_std(p) ** 2 for p in pools)
    return math.sqrt(model_dim * energy)


def aggregated_noise_norm(pools: Sequence[PoolPlan], model_dim: int, expected_clients: float) -> float:
    """The norm of one round's aggregated noise, ``summed_noise_norm / K``."""
    return summed_noise_norm(pools, model_dim) / expected_clients


def noise_to_signal(groups: Sequence[GroupPlan], pools: Sequence[PoolPlan], model_dim: int) -> float | None:
    """rho of docs/planning.md §13; ``None`` when no client is sampled (no signal at all)."""
    signal = sum(g.sampling_rate * g.num_clients * g.clip_norm for g in groups)
    if not signal > 0:
        return None
    return summed_noise_norm(pools, model_dim) / signal


def scaled_scenario(scenario: Scenario, factor: float) -> Scenario:
    """Every group ``ceil(N_g f)`` clients and K (or, given a global rate, the same rate) scaled by f."""
    groups = [g.model_copy(update={"num_clients": max(1, math.ceil(g.num_clients * factor - 1e-9))}) for g in scenario.groups]
    update: dict[str, object] = {"groups": groups}
    if scenario.expected_clients is not None:
        update["expected_clients"] = scenario.expected_clients * factor
    return scenario.model_copy(update=update)


RatioAt = Callable[[Scenario], float]


def clients_needed(
    scenario: Scenario, ratio_now: float, ratio_at: RatioAt, targets: Sequence[float] = NOISE_TO_SIGNAL_TARGETS
) -> list[ClientsForNoiseToSignal]:
    """The smallest scale of ``scenario`` whose plan has rho <= each target (docs/planning.md §13).

    ``ratio_at(scenario)`` plans a scaled scenario and returns its rho (``inf`` when the
    scaled scenario cannot be planned). rho falls about as 1/f (the rates, and so the
    noise multipliers, stay near the same), so each trial f interpolates log rho linearly
    in log f between the nearest scales known to miss and to meet the target (starting
    from ``f = rho(1) / target``); the search ends when the smallest f known to meet is
    within ``SCALE_RESOLUTION`` of the largest known to miss. It assumes rho decreases in
    f (tested on the methods, not proven: re-optimised rates may move).
    """
    cache: dict[float, float] = {1.0: ratio_now}
    largest = MAX_GROUP_SIZE / max(g.num_clients for g in scenario.groups)

    def rho(factor: float) -> float:
        if factor not in cache:
            try:
                cache[factor] = ratio_at(scaled_scenario(scenario, factor))
            except GdpfedError:
                cache[factor] = math.inf
        return cache[factor]

    return [_search(scenario, target, rho, cache, largest) for target in targets]


def _next_factor(target: float, cache: dict[float, float], largest: float) -> float:
    """The next scale to plan: a secant step in log rho against log f, aimed just above the crossing.

    The step uses the two finite points closest to the target (or rho ~ 1/f with one), is
    aimed ``SCALE_RESOLUTION^(1/4)`` above the estimated crossing (so it tends to meet the
    target) and is kept at least ``SCALE_RESOLUTION^(1/2)`` inside the current bracket, so
    every trial either closes the bracket or shrinks it.
    """
    misses = [f for f, r in cache.items() if r > target]
    meets = [f for f, r in cache.items() if r <= target]
    miss, meet = max(misses, default=None), min(meets, default=None)
    finite = sorted(
        ((f, r) for f, r in cache.items() if math.isfinite(r) and r > 0),
        key=lambda item: abs(math.log(item[1] / target)),
    )
    if not finite:
        assert miss is not None
        return min(largest, miss * 4.0)
    (f1, r1), slope = finite[0], -1.0
    if len(finite) > 1:
        f2, r2 = finite[1]
        if f1 != f2 and r1 != r2:
            slope = min(-0.1, (math.log(r2) - math.log(r1)) / (math.log(f2) - math.log(f1)))
    guess = math.exp(math.log(f1) + (math.log(target) - math.log(r1)) / slope) * SCALE_RESOLUTION**0.25
    lo = miss * SCALE_RESOLUTION**0.5 if miss is not None else 0.0
    hi = meet / SCALE_RESOLUTION**0.5 if meet is not None else largest
    if miss is not None and meet is None:
        lo = miss * 1.05
    return min(max(guess, lo), hi)


def _search(
    scenario: Scenario, target: float, rho: Callable[[float], float], cache: dict[float, float], largest: float
) -> ClientsForNoiseToSignal:
    for _ in range(MAX_PLANS_PER_TARGET):
        misses = [f for f, r in cache.items() if r > target]
        meets = [f for f, r in cache.items() if r <= target]
        miss, meet = max(misses, default=None), min(meets, default=None)
        if meet is not None and miss is not None and meet / miss <= SCALE_RESOLUTION:
            break
        if meet is None and miss is not None and miss >= largest:
            break
        if miss is None and meet is not None and meet < 1e-6:
            break
        rho(_next_factor(target, cache, largest))
    misses = [f for f, r in cache.items() if r > target]
    meets = [f for f, r in cache.items() if r <= target]
    miss, meet = max(misses, default=None), min(meets, default=None)
    if meet is None:
        population = scaled_scenario(scenario, largest).total_clients
        return ClientsForNoiseToSignal(
            target=target,
            note=f"not reached with up to {population} clients (groups scaled to the schema's limit)",
        )
    scaled = scaled_scenario(scenario, meet)
    note = None
    if miss is None:
        note = "met by every scale tried down to this one"
    elif not math.isfinite(cache[miss]):
        note = "smaller populations cannot be planned with this method"
    elif meet / miss > SCALE_RESOLUTION:
        note = f"search stopped after {MAX_PLANS_PER_TARGET} plans; the smallest size is between " + (
            f"{scaled_scenario(scenario, miss).participation:.4g} and {scaled.participation:.4g} clients per round"
        )
    return ClientsForNoiseToSignal(
        target=target,
        expected_clients=scaled.participation,
        total_clients=scaled.total_clients,
        noise_to_signal=cache[meet],
        note=note,
    )


def scaled_sizes(num_clients: np.ndarray, factor: float) -> np.ndarray:
    """``max(1, ceil(N_g f))`` per group, as :func:`scaled_scenario` scales them."""
    return np.maximum(1.0, np.ceil(np.asarray(num_clients, dtype=float) * factor - 1e-9))


class ScaledDesign:
    """``plan``'s design (rates, pools, noise std, keep ratios) on its population scaled by f.

    docs/planning.md §13: the scaled plan keeps every rate, so every noise multiplier (a
    function of ``(q, T, epsilon, delta)`` alone); :meth:`ratio` recomputes what depends on
    the population: the signal ``sum_g q_g ceil(N_g f) C_g``, each pool's threshold and
    inflation ``I_P`` (``planner.secagg.pool_thresholds``, as the plan computes them), with
    adaptive clipping ``sigma_Delta`` for ``sigma_b`` at the scaled K, and for a pool stating
    a Skellam block its noise at the scaled threshold (:meth:`skellam`). At f = 1 it is the
    plan's own ``noise_to_signal``.
    """

    def __init__(self, plan: Plan) -> None:
        scenario = plan.scenario
        self.scenario = scenario
        index = {g.id: i for i, g in enumerate(plan.groups)}
        self.num_clients = np.array([float(g.num_clients) for g in plan.groups])
        self.rates = np.array([float(g.sampling_rate) for g in plan.groups])
        self.clip_norms = np.array([float(g.clip_norm) for g in plan.groups])
        self.members = [np.array([index[g] for g in pool.groups], dtype=int) for pool in plan.pools]
        self.keep = np.array([float(pool.keep_ratio) for pool in plan.pools])
        self.noise_std = np.array([float(pool.noise_std) for pool in plan.pools])
        self.multipliers = np.array([float(pool.noise_multiplier) for pool in plan.pools])
        self.adaptive = scenario.adaptive_clip is not None and any(p.update_noise_multiplier is not None for p in plan.pools)
        self.blocks = [pool.discrete for pool in plan.pools]
        # the continuous s_P at the plan's own size, recomputed as at every scale (so that a
        # Skellam pool's growth, :meth:`skellam`, is exactly 1 at f = 1); only a plan with blocks reads it
        self.continuous_at_plan: np.ndarray | None = None
        if any(block is not None for block in self.blocks):
            self.continuous_at_plan = self.continuous(scaled_sizes(self.num_clients, 1.0), 1.0)

    def participation(self, sizes: np.ndarray, factor: float) -> float:
        """K at scale f: ``expected_clients f``, or the global rate times the scaled population."""
        s = self.scenario
        if s.expected_clients is not None:
            return float(s.expected_clients) * factor
        assert s.sampling_rate is not None
        return float(s.sampling_rate) * float(sizes.sum())

    def continuous(self, sizes: np.ndarray, factor: float) -> np.ndarray | None:
        """Each pool's continuous s_P at scale f (:func:`continuous_noise_std`): ``noise_std``, with
        adaptive clipping times ``sigma_Delta / z_eff`` for ``sigma_b`` at the scaled K (``None``
        where that sigma_b is too small)."""
        std = self.noise_std
        if not self.adaptive:
            return std
        settings = self.scenario.adaptive_clip
        assert settings is not None
        sigma_b = (
            float(settings.count_noise_std) if settings.count_noise_std is not None
            else DEFAULT_COUNT_NOISE_PER_CLIENT * self.participation(sizes, factor)
        )
        try:
            update = np.array([update_noise_multiplier(z, sigma_b) if z > 0 else 0.0 for z in self.multipliers])
        except GdpfedError:
            return None
        return np.where(self.multipliers > 0, std * update / np.where(self.multipliers > 0, self.multipliers, 1.0), std)

    def skellam(self, thresholds: Sequence[SecaggThreshold | None], continuous: np.ndarray) -> list[float | None] | None:
        """Each pool's Skellam s_P at the scaled thresholds (:func:`skellam_noise_std`; ``None`` for
        a pool without a block), times its continuous s_P's growth from the plan's size (adaptive
        clipping's sigma_Delta / z_eff moves with sigma_b = 0.05 K; 1 otherwise): the block's
        count factor m follows sigma_b as sigma_Delta does, so the block's excess over the
        continuous noise is taken to be the plan's at every size (docs/planning.md §13).
        ``None`` where a scaled threshold leaves no honest survivor (t <= c)."""
        assert self.continuous_at_plan is not None
        out: list[float | None] = []
        for p, (block, threshold) in enumerate(zip(self.blocks, thresholds, strict=True)):
            if block is None:
                out.append(None)
                continue
            t = block.min_survivors if threshold is None else threshold.threshold
            if t <= block.colluding_clients:
                return None
            at_plan = float(self.continuous_at_plan[p])
            growth = float(continuous[p]) / at_plan if at_plan > 0 else 1.0
            out.append(skellam_noise_std(block, t) * growth)
        return out

    def ratio(self, factor: float) -> float:
        """rho of the design at scale f (``inf`` where adaptive clipping's sigma_b is too small, or
        a Skellam pool's scaled threshold leaves no honest survivor)."""
        sizes = scaled_sizes(self.num_clients, factor)
        signal = float(np.dot(self.rates * sizes, self.clip_norms))
        if not signal > 0:
            return math.inf
        s = self.scenario
        thresholds = pool_thresholds(
            [(sizes[m], self.rates[m]) for m in self.members], float(s.dropout_rate), s.abort_probability
        )
        inflation = np.array([1.0 if t is None else max(1.0, t.expected_survivors / t.threshold) for t in thresholds])
        std = self.continuous(sizes, factor)
        if std is None:
            return math.inf
        if self.continuous_at_plan is not None:
            skellam = self.skellam(thresholds, std)
            if skellam is None:
                return math.inf
            std = np.array([run_noise_std(float(c), k) for c, k in zip(std, skellam, strict=True)])
        energy = float(np.dot(self.keep * inflation, std * std))
        return math.sqrt(s.model_dim * energy) / signal


def derived_clients_needed(
    plan: Plan, targets: Sequence[float] = NOISE_TO_SIGNAL_TARGETS
) -> list[ClientsForNoiseToSignal]:
    """The smallest scale f at which ``plan``'s design has rho <= each target (docs/planning.md §13).

    rho of the scaled design (:class:`ScaledDesign`) falls about as 1/f, so the first trial
    is ``f = rho(1) / target``, followed by up to ``SECANT_STEPS`` secant steps in log rho
    against log f; the crossing is then bracketed and bisected in log f until the smallest
    f known to meet is within ``DERIVED_RESOLUTION`` of the largest known to miss (about
    six threshold computations per target, no plan). For the uniform
    methods this is the size re-planning finds (their rate ``K / N`` is scale-free); the
    optimising methods may re-choose rates at the larger size and need somewhat fewer
    clients, so for them it is an upper estimate of what re-planning (``clients_needed``)
    reports (bench planner prints both).
    """
    design = ScaledDesign(plan)
    ratio_now = design.ratio(1.0)
    largest = MAX_GROUP_SIZE / float(design.num_clients.max())
    return [_derive(design, target, ratio_now, largest) for target in targets]


def _derive(design: ScaledDesign, target: float, ratio_now: float, largest: float) -> ClientsForNoiseToSignal:
    cache: dict[float, float] = {}

    def clamp(factor: float) -> float:
        return min(largest, max(SMALLEST_FACTOR, factor))

    def rho(factor: float) -> float:
        if factor not in cache:
            cache[factor] = design.ratio(factor)
        return cache[factor]

    # rho f is nearly constant (only ceil and I_P move it): from the 1/f guess, a few secant
    # steps in log rho against log f (slope -1 until two points are known) land next to the
    # crossing, aimed a little above it so that they tend to meet the target
    factor = clamp(ratio_now / target) if math.isfinite(ratio_now) else 1.0
    previous: tuple[float, float] | None = None
    for _ in range(SECANT_STEPS):
        value = rho(factor)
        if not (math.isfinite(value) and value > 0):
            break
        slope = -1.0
        if previous is not None and previous[0] != factor and previous[1] != value:
            slope = min(-0.1, math.log(value / previous[1]) / math.log(factor / previous[0]))
        previous = (factor, value)
        following = clamp(factor * math.exp(math.log(target / value) / slope) * DERIVED_RESOLUTION**0.5)
        if abs(math.log(following / factor)) <= math.log(DERIVED_RESOLUTION):
            break
        factor = following
    meet = min((f for f, r in cache.items() if r <= target), default=None)
    miss = max((f for f, r in cache.items() if r > target and (meet is None or f < meet)), default=None)
    # bracket the crossing with widening steps away from the known side
    step = DERIVED_RESOLUTION**2
    while meet is None and miss is not None and miss < largest:
        f = clamp(miss * step)
        if rho(f) <= target:
            meet = f
        else:
            miss = f
        step *= step
    while miss is None and meet is not None and meet > SMALLEST_FACTOR:
        f = clamp(meet / step)
        if rho(f) <= target:
            meet = f
        else:
            miss = f
        step *= step
    if meet is None:
        population = int(scaled_sizes(design.num_clients, largest).sum())
        return ClientsForNoiseToSignal(
            target=target,
            note=f"not reached with up to {population} clients (groups scaled to the schema's limit)",
        )
    note = None
    if miss is None:
        note = "met by every scale tried down to this one"
    else:
        while meet / miss > DERIVED_RESOLUTION:
            mid = math.sqrt(meet * miss)
            if rho(mid) <= target:
                meet = mid
            else:
                miss = mid
    sizes = scaled_sizes(design.num_clients, meet)
    return ClientsForNoiseToSignal(
        target=target,
        expected_clients=design.participation(sizes, meet),
        total_clients=int(sizes.sum()),
        noise_to_signal=rho(meet),
        note=note,
    )
