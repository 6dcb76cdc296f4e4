"""Adaptive clipping in a plan: the update's and the count's noise from one multiplier.

(docs/planning.md §15; Andrew et al. 2021's Theorem 1, as that section reconstructs it
[recon].) With adaptive clipping a pool's released vector carries the clipped updates (clip
``S^t``, sensitivity ``S^t``) with noise std ``sigma_Delta S^t``, and one more coordinate,
the count of ``b - 1/2`` (``b = 1`` for a client whose update was not clipped:
sensitivity ``1/2``) with noise std ``sigma_b``. Both parts of one client's contribution
are released together, so the round is one Gaussian mechanism whose sensitivity,
measured in noise standard deviations, is ``sqrt((1/sigma_Delta)^2 + (1/(2 sigma_b))^2)``:
the multiplier the accountant must use is

    z_eff = (sigma_Delta^-2 + (2 sigma_b)^-2)^(-1/2),

and for the plan's calibrated ``z_eff`` the update gets

    sigma_Delta = (z_eff^-2 - (2 sigma_b)^-2)^(-1/2),     which needs sigma_b > z_eff / 2.

The plan's ``noise_multiplier`` stays ``z_eff`` (the ledger composes exactly what it
composed without adaptive clipping); the pool states ``update_noise_multiplier``
(``sigma_Delta``) and ``count_noise_std`` (``sigma_b``). Pools without noise (opted-out
groups, ``nonprivate`` plans) count without noise too.
"""

from __future__ import annotations

import math

from accounting.errors import InvalidInputError
from planner.schema import AdaptiveClip, PoolPlan, Scenario

# Andrew et al.'s default for the count's noise: sigma_b = 0.05 K (the noisy fraction of
# unclipped clients then has std 0.05 with one pool).
DEFAULT_COUNT_NOISE_PER_CLIENT = 0.05
# Relative tolerance for numbers read back from a JSON document.
_REL_TOL = 1e-9


def effective_noise_multiplier(update_noise_multiplier: float, count_noise_std: float) -> float:
    """``z_eff = (sigma_Delta^-2 + (2 sigma_b)^-2)^(-1/2)`` (docs/planning.md §15); 0 when
    either part has no noise (that part alone is unprotected)."""
    if update_noise_multiplier <= 0 or count_noise_std <= 0:
        return 0.0
    return float((update_noise_multiplier**-2 + (2.0 * count_noise_std) ** -2) ** -0.5)


def update_noise_multiplier(effective: float, count_noise_std: float, *, field: str = "adaptive_clip.count_noise_std") -> float:
    """``sigma_Delta = (z_eff^-2 - (2 sigma_b)^-2)^(-1/2)`` (docs/planning.md §15); 0 for
    ``z_eff = 0`` (no noise). ``InvalidInputError(field)`` unless ``sigma_b > z_eff / 2``:
    the count alone would then already cost the whole budget."""
    if effective <= 0:
        return 0.0
    if not count_noise_std > effective / 2:
        raise InvalidInputError(
            field,
            f"{count_noise_std:.6g} must exceed z_eff / 2 = {effective / 2:.6g} (noise multiplier z_eff "
            f"{effective:.6g}): the count of unclipped clients alone would spend the budget; raise "
            "count_noise_std (default 0.05 K) or plan without adaptive_clip (docs/planning.md §15)",
        )
    remainder = effective**-2 - (2.0 * count_noise_std) ** -2
    update = float(remainder**-0.5)
    # The ledger composes z_eff itself, so the released pair must be at least that noisy: the
    # closed form can land an ulp low (z_eff(sigma_Delta, sigma_b) < z_eff for about one pair in
    # ten), which would make the ledger optimistic by that ulp; step up until it is not.
    while effective_noise_multiplier(update, count_noise_std) < effective:
        update = math.nextafter(update, math.inf)
    return update


def count_noise_std(settings: AdaptiveClip, scenario: Scenario) -> float:
    """``sigma_b``: the block's value, or ``0.05 K`` with K the scenario's expected clients."""
    if settings.count_noise_std is not None:
        return float(settings.count_noise_std)
    return DEFAULT_COUNT_NOISE_PER_CLIENT * scenario.participation


def initial_clip_norm(scenario: Scenario) -> float:
    """``S^0``: the block's ``initial_clip_norm``, or the scenario's ``clip_norm``."""
    settings = scenario.adaptive_clip
    if settings is None or settings.initial_clip_norm is None:
        return float(scenario.clip_norm)
    return float(settings.initial_clip_norm)


def check_one_clip_norm(scenario: Scenario, clip_norms: dict[str, float]) -> None:
    """Adaptive clipping clips every client at one ``S^t``: refuse per-group clip norms
    (``idp_scale``, a group's own ``clip_norm``) with ``InvalidInputError("adaptive_clip")``."""
    other = {group: clip for group, clip in clip_norms.items() if not math.isclose(clip, scenario.clip_norm, rel_tol=_REL_TOL)}
    if other:
        group, clip = next(iter(other.items()))
        raise InvalidInputError(
            "adaptive_clip",
            f"clips every client at one norm S^t, but group {group!r} is clipped at {clip:.6g} "
            f"(clip_norm {scenario.clip_norm:.6g}): per-group clip norms (idp_scale, a group's clip_norm) "
            "are not supported with adaptive clipping",
        )


def adaptive_pools(scenario: Scenario, pools: list[PoolPlan], clip_norms: dict[str, float]) -> list[PoolPlan]:
    """``pools`` with ``update_noise_multiplier`` and ``count_noise_std`` stated (unchanged
    without an ``adaptive_clip`` block). A pool with noise gets ``sigma_b`` and
    ``sigma_Delta`` from its ``noise_multiplier`` (z_eff); a pool without noise counts
    without noise. Raises ``InvalidInputError`` naming the field when ``sigma_b <= z_eff/2``
    or groups have their own clip norms."""
    settings = scenario.adaptive_clip
    if settings is None:
        return pools
    check_one_clip_norm(scenario, clip_norms)
    sigma_b = count_noise_std(settings, scenario)
    out = []
    for pool in pools:
        if pool.noise_multiplier > 0:
            field = "adaptive_clip.count_noise_std"
            update = update_noise_multiplier(pool.noise_multiplier, sigma_b, field=field)
            out.append(pool.model_copy(update={"update_noise_multiplier": update, "count_noise_std": sigma_b}))
        else:
            out.append(pool.model_copy(update={"update_noise_multiplier": 0.0, "count_noise_std": 0.0}))
    return out


def check_adaptive_pools(scenario: Scenario, pools: list[PoolPlan], clip_norms: dict[str, float]) -> None:
    """What ``planner.verify`` checks of an adaptive plan (docs/ledger.md §5): every pool's
    ``count_noise_std`` and ``update_noise_multiplier`` re-derived from the block and the
    pool's ``noise_multiplier``, so the released mechanism is never weaker than the z_eff
    the ledger composes. ``InvalidInputError`` naming the pool's field otherwise."""
    expected = {pool.id: pool for pool in adaptive_pools(scenario, pools, clip_norms)}
    for pool in pools:
        derived = expected[pool.id]
        for name in ("count_noise_std", "update_noise_multiplier"):
            stated, wanted = getattr(pool, name), getattr(derived, name)
            if stated is None or not math.isclose(stated, wanted, rel_tol=_REL_TOL, abs_tol=1e-12):
                raise InvalidInputError(
                    f"pools.{pool.id}.{name}",
                    f"{stated} is not the {wanted:.6g} the adaptive_clip block and noise multiplier "
                    f"{pool.noise_multiplier:.6g} give (docs/planning.md §15): the document is inconsistent",
                )
