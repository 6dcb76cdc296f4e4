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

``clients_needed`` answers "how many clients per round (and in the population) bring rho
to a target with the same budgets and rounds": it scales every group's size and K by one
factor f (the same share of the population sampled per round) and *re-plans* with the
same method at each trial f, searching for the smallest f whose plan meets the target.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from accounting.errors import GdpfedError
from planner.schema import ClientsForNoiseToSignal, GroupPlan, PoolPlan, Scenario

# The targets ``make_plan`` reports (docs/planning.md §13).
NOISE_TO_SIGNAL_TARGETS = (1.0, 0.1)
# Search resolution: the reported f is within this factor of the smallest that meets a target.
SCALE_RESOLUTION = 1.02
# Plans one target may cost (the search is a secant step on rho(f) ~ rho(1) / f, then bisection).
MAX_PLANS_PER_TARGET = 10
# Largest scaled group (the scenario schema's bound on num_clients).
MAX_GROUP_SIZE = 10**9


def update_noise_std(pool: PoolPlan) -> float:
    """s_P, the std of the noise on the pool's update sum at the plan's clip norm: ``noise_std``,
    or with adaptive clipping ``sigma_Delta / z_eff`` times it (docs/planning.md §15)."""
    if pool.update_noise_multiplier is not None and pool.noise_multiplier > 0:
        return pool.noise_std * pool.update_noise_multiplier / pool.noise_multiplier
    return pool.noise_std


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
