"""The plan's privacy mechanism for one client: clip, round to the grid, add the noise share.

(docs/trainer.md §Rounds, step 4.) This is everything a client needs to privatise its
update, and nothing else: numpy, ``trainer.units.client.noise`` and the plan schema, no torch, no
secure aggregation. The simulator's round engine (``trainer/units/client/rounds.py``) and the Flower
ClientApp (``trainer/flower/client_app.py``, which Flower starts as a fresh process for
every message) both call it.

Value bound for secure aggregation: a client's vector has coordinates
``|x_j| <= C + z s_P + 2/scale`` where ``z = noise_tail_multiplier(d * K * T)`` makes
the chance that *any* noise coordinate of the whole run exceeds it at most 1e-9
(``trainer/units/client/noise.py``). Secure aggregation refuses a vector beyond its bound; ``privatize``
checks first and raises ``NoiseBoundExceeded`` rather than clamp a noise share, which
would change the released distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from accounting.errors import InvalidInputError
from trainer.units.client import noise

if TYPE_CHECKING:
    from planner.schema import Plan


class NoiseBoundExceeded(RuntimeError):
    """A noise share fell outside the secure-aggregation value bound (probability <= 1e-9 per run)."""


@dataclass(frozen=True)
class PoolMechanism:
    """What the engine needs to run one pool's clients through the mechanism."""

    pool_id: str
    index: int
    group_ids: tuple[str, ...]
    clip_norms: dict[str, float]
    share_std: float
    threshold: int
    keep_ratio: float
    scale: float
    value_bound: float
    # z of the value bound (noise.noise_tail_multiplier over the run's draws)
    tail_multiplier: float = 0.0
    # Adaptive clipping (docs/trainer.md §Adaptive clipping): sigma_Delta, and the std of one
    # client's noise share on the count coordinate, sigma_b / sqrt(m_P). None: fixed clipping.
    update_noise_multiplier: float | None = None
    count_share_std: float = 0.0


def pool_mechanisms(plan: Plan, dim: int, rounds: int, *, adaptive: bool = False) -> list[PoolMechanism]:
    """Per-pool clip norms, noise share, grid scale and value bound, after checking the plan.

    ``adaptive``: the pools also carry sigma_Delta (re-derived from the pool's z_eff and
    sigma_b, ``planner.adaptive_clip.update_noise_multiplier``) and the count's share std;
    ``at_clip`` then gives each round's mechanism (docs/trainer.md §Adaptive clipping).

    Refuses (``InvalidInputError``) a plan of another privacy unit, a pool whose shares
    release less than its ``noise_std`` and a private group (``epsilon`` set) sampled in a
    pool without noise. The
    whole plan, its budgets included, is verified before a run starts
    (``planner.verify.verify_executable``, called by ``trainer.runner.prepare_run``).
    """
    if plan.privacy_unit != "client":
        # Clipping whole updates and Gaussian noise shares protect clients; a plan of another
        # privacy unit (silo sample-level, metric) needs its own mechanism, never this one.
        raise InvalidInputError(
            "privacy_unit",
            f"the client-level mechanism (clipping, Gaussian noise shares, secure aggregation) runs "
            f"client plans only; this plan's privacy_unit is {plan.privacy_unit!r}",
        )
    expected = [group.expected_clients for group in plan.groups]
    # adaptive clipping draws one more noise coordinate per client: the count
    z = noise.noise_tail_multiplier(noise.total_draws(dim + 1 if adaptive else dim, expected, rounds))
    mechanisms = []
    for index, pool in enumerate(plan.pools):
        groups = [plan.group(group_id) for group_id in pool.groups]
        noise.check_pool_noise(pool.id, pool.noise_std, pool.noise_share_std, pool.secagg_threshold)
        if pool.noise_share_std == 0 and plan.method != "nonprivate":
            # a group sampled at rate 0 releases nothing: a re-plan puts an exhausted group
            # (its epsilon kept, docs/planning.md §9) in a pool without noise
            private = [g.id for g in groups if g.epsilon is not None and g.sampling_rate > 0]
            if private:
                raise InvalidInputError(
                    f"pools.{pool.id}.noise_multiplier",
                    f"is 0 but group(s) {', '.join(private)} have an epsilon: the plan would not protect them",
                )
        clip_norms = {g.id: float(g.clip_norm) for g in groups}
        largest_clip = max(clip_norms.values())
        finest_clip = min(clip_norms.values())
        scale = noise.grid_scale(finest_clip, pool.noise_share_std, dim)
        update_multiplier, count_share = _adaptive_noise(plan, pool.id) if adaptive else (None, 0.0)
        mechanisms.append(
            PoolMechanism(
                pool_id=pool.id,
                index=index,
                group_ids=tuple(pool.groups),
                clip_norms=clip_norms,
                share_std=float(pool.noise_share_std),
                threshold=int(pool.secagg_threshold),
                keep_ratio=float(pool.keep_ratio),
                scale=scale,
                value_bound=noise.value_bound(largest_clip, pool.noise_share_std, scale, z),
                tail_multiplier=z,
                update_noise_multiplier=update_multiplier,
                count_share_std=count_share,
            )
        )
    return mechanisms


def _adaptive_noise(plan: Plan, pool_id: str) -> tuple[float, float]:
    """``(sigma_Delta, sigma_b / sqrt(m_P))`` of an adaptive plan's pool, sigma_Delta re-derived
    from its z_eff and sigma_b (docs/planning.md §15), never read from the document."""
    # start-up time: a Flower ClientApp, a new process per message, imports this module; the
    # planner loads only for an adaptive plan's pools
    from planner.adaptive_clip import update_noise_multiplier

    pool = plan.pool(pool_id)
    if plan.scenario.adaptive_clip is None or pool.count_noise_std is None:
        raise InvalidInputError(
            "strategy-option adaptive_clip",
            f"pool {pool_id} states no count_noise_std: plan a scenario with an adaptive_clip block (docs/planning.md §15)",
        )
    sigma_b = float(pool.count_noise_std)
    field = f"pools.{pool_id}.count_noise_std"
    return update_noise_multiplier(float(pool.noise_multiplier), sigma_b, field=field), sigma_b / math.sqrt(
        pool.secagg_threshold
    )


def at_clip(mechanism: PoolMechanism, clip_norm: float, dim: int) -> PoolMechanism:
    """The pool's mechanism for a round clipped at ``S^t = clip_norm`` (docs/trainer.md
    §Adaptive clipping): every group clipped at ``S^t``, the update's noise share
    ``sigma_Delta S^t / sqrt(m_P)``, a grid fine enough for the update, its share and the
    count's share (at least 2, so ``b - 1/2 = +-1/2`` lies on it), and a value bound that
    covers the update coordinates and the count coordinate ``|b - 1/2 + share| <= 1/2 + z
    sigma_b / sqrt(m_P) + 2/scale``."""
    if mechanism.update_noise_multiplier is None:
        raise ValueError(f"pool {mechanism.pool_id}'s mechanism was not built for adaptive clipping")
    share = mechanism.update_noise_multiplier * clip_norm / math.sqrt(mechanism.threshold)
    finest_share = min(s for s in (share, mechanism.count_share_std, math.inf) if s > 0)
    scale = max(noise.grid_scale(clip_norm, 0.0 if math.isinf(finest_share) else finest_share, dim), 2.0)
    z = mechanism.tail_multiplier
    bound = max(
        noise.value_bound(clip_norm, share, scale, z),
        noise.value_bound(0.5, mechanism.count_share_std, scale, z),
    )
    return replace(
        mechanism,
        clip_norms=dict.fromkeys(mechanism.clip_norms, float(clip_norm)),
        share_std=share,
        scale=scale,
        value_bound=bound,
    )


def finite_update(update: np.ndarray) -> np.ndarray:
    """The client's update, or zeros when its local training produced a non-finite value.

    The client's own decision (docs/trainer.md §Divergence): it sends a zero update with its
    noise share as usual, so the pool sum's sensitivity (a zero vector has norm 0 <= C_g)
    and the released noise are exactly what the plan accounts for, and one diverged
    client cannot poison the pool's sum with NaN or infinity.
    """
    return update if bool(np.isfinite(update).all()) else np.zeros_like(update)


def privatize(
    update: np.ndarray,
    clip_norm: float,
    mechanism: PoolMechanism,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """One client's masked-input vector and its encoded pre-noise part (both decoded floats).

    ``x = enc(clip(Delta, C_g)) / scale + round(N(0, s_P^2) scale) / scale``: every value
    is a multiple of ``1/scale`` (a power of two), so secure aggregation encodes it exactly.
    A non-finite ``Delta`` is sent as zeros (``finite_update``).
    """
    update = finite_update(update)
    pre_noise = noise.encode_clipped(update, clip_norm, mechanism.scale, rng)
    total = pre_noise + noise.draw_noise_share(update.shape[0], mechanism.share_std, mechanism.scale, rng)
    vector = total / mechanism.scale
    largest = float(np.max(np.abs(vector)))
    if largest > mechanism.value_bound:
        raise NoiseBoundExceeded(
            f"pool {mechanism.pool_id}: a coordinate reached {largest:.6g} > value bound "
            f"{mechanism.value_bound:.6g} (an event of probability <= 1e-9 per run); "
            "rerun with another seed"
        )
    return vector, pre_noise / mechanism.scale


def privatize_counted(
    update: np.ndarray,
    clip_norm: float,
    mechanism: PoolMechanism,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """``privatize`` with adaptive clipping's count appended: ``[x, (b - 1/2) + share]``
    with ``b = 1`` when ``||Delta|| <= clip_norm`` (docs/trainer.md §Adaptive clipping).

    The update part is ``privatize``'s, with the same draws from ``rng``; the count's share
    ``round(N(0, (sigma_b/sqrt(m_P))^2) scale) / scale`` is drawn after them. Returns the
    ``d + 1`` vector and the encoded pre-noise update (``d``).
    """
    update = finite_update(update)
    unclipped = math.sqrt(float(np.einsum("i,i->", update, update))) <= clip_norm
    vector, pre_noise = privatize(update, clip_norm, mechanism, rng)
    count_share = noise.draw_noise_share(1, mechanism.count_share_std, mechanism.scale, rng)[0] / mechanism.scale
    count = (0.5 if unclipped else -0.5) + count_share
    if abs(count) > mechanism.value_bound:
        raise NoiseBoundExceeded(
            f"pool {mechanism.pool_id}: the count coordinate reached {count:.6g} > value bound "
            f"{mechanism.value_bound:.6g} (an event of probability <= 1e-9 per run); rerun with another seed"
        )
    return np.append(vector, count), pre_noise
