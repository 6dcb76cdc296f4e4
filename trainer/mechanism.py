"""The plan's privacy mechanism for one client: clip, round to the grid, add the noise share.

(docs/trainer.md §Rounds, step 4.) This is everything a client needs to privatise its
update, and nothing else: numpy, ``trainer.noise`` and the plan schema, no torch, no
secure aggregation. The simulator's round engine (``trainer/rounds.py``) and the Flower
ClientApp (``trainer/flower/client_app.py``, which Flower starts as a fresh process for
every message) both call it.

Value bound for secure aggregation: a client's vector has coordinates
``|x_j| <= C + z s_P + 2/scale`` where ``z = noise_tail_multiplier(d * K * T)`` makes
the chance that *any* noise coordinate of the whole run exceeds it at most 1e-9
(``trainer/noise.py``). Secure aggregation refuses a vector beyond its bound; ``privatize``
checks first and raises ``NoiseBoundExceeded`` rather than clamp a noise share, which
would change the released distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from accounting.errors import InvalidInputError
from trainer import noise

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


def pool_mechanisms(plan: Plan, dim: int, rounds: int) -> list[PoolMechanism]:
    """Per-pool clip norms, noise share, grid scale and value bound, after checking the plan.

    Refuses (``InvalidInputError``) a plan of another privacy unit, a pool whose shares
    release less than its ``noise_std`` and a private group (``epsilon`` set) in a pool
    without noise. The
    whole plan, its budgets included, is verified before a run starts
    (``planner.verify.verify_executable``, called by ``trainer.run.runner.prepare_run``).
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
    z = noise.noise_tail_multiplier(noise.total_draws(dim, expected, rounds))
    mechanisms = []
    for index, pool in enumerate(plan.pools):
        groups = [plan.group(group_id) for group_id in pool.groups]
        noise.check_pool_noise(pool.id, pool.noise_std, pool.noise_share_std, pool.secagg_threshold)
        if pool.noise_share_std == 0 and plan.method != "nonprivate":
            private = [g.id for g in groups if g.epsilon is not None]
            if private:
                raise InvalidInputError(
                    f"pools.{pool.id}.noise_multiplier",
                    f"is 0 but group(s) {', '.join(private)} have an epsilon: the plan would not protect them",
                )
        clip_norms = {g.id: float(g.clip_norm) for g in groups}
        largest_clip = max(clip_norms.values())
        finest_clip = min(clip_norms.values())
        scale = noise.grid_scale(finest_clip, pool.noise_share_std, dim)
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
            )
        )
    return mechanisms


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
