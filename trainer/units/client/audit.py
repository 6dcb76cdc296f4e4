"""The privacy audit of the client-level Gaussian release (docs/secure-aggregation.md §Audit).

Runs the real client pipeline of :func:`trainer.units.client.mechanism.privatize` (clip,
encode on the grid, add the rounded Gaussian noise share, check the value bound) for the
``threshold`` clients whose shares make the pool's noise, and sums their vectors as secure
aggregation does, many times on two neighbouring inputs: the target client's update of
norm C present, or zero (its share still sent, as the accounting assumes). The score is the
released sum's first coordinate (the target's direction); :func:`accounting.audit.audit_summary`
bounds epsilon from below. ``noise_std_factor`` builds the deliberately broken variant
(shares of that multiple of the planned std).
"""

from __future__ import annotations

import math

import numpy as np

import accounting
from accounting.accountants import TIGHT_ACCOUNTANT
from accounting.audit import audit_summary
from planner.units import UNITS
from trainer.units.client import noise
from trainer.units.client.mechanism import PoolMechanism, privatize


def pool_mechanism(noise_multiplier: float, clip_norm: float, threshold: int, dimension: int,
                   noise_std_factor: float = 1.0) -> PoolMechanism:
    """One pool's mechanism as ``pool_mechanisms`` builds it from a plan: share std
    sigma C / sqrt(t) (times ``noise_std_factor``), the grid and the value bound."""
    share = noise_multiplier * clip_norm / math.sqrt(threshold) * noise_std_factor
    scale = noise.grid_scale(clip_norm, share, dimension)
    z = noise.noise_tail_multiplier(noise.total_draws(dimension, [threshold], 1))
    return PoolMechanism(
        pool_id="audit", index=0, group_ids=("audit",), clip_norms={"audit": clip_norm}, share_std=share,
        threshold=threshold, keep_ratio=1.0, scale=scale, value_bound=noise.value_bound(clip_norm, share, scale, z),
        tail_multiplier=z,
    )


def scores(mechanism: PoolMechanism, *, clip_norm: float, dimension: int, runs: int,
           seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores without the target's update, scores with it), ``runs`` each, one release per run."""
    rng = np.random.default_rng(seed)
    target = np.zeros(dimension)
    target[0] = clip_norm
    others = rng.normal(size=(mechanism.threshold - 1, dimension))
    out = []
    for present in (False, True):
        values = np.empty(runs)
        for run in range(runs):
            released = privatize(target if present else np.zeros(dimension), clip_norm, mechanism, rng)[0]
            for other in others:
                released = released + privatize(other, clip_norm, mechanism, rng)[0]
            values[run] = released[0]
        out.append(values)
    return out[0], out[1]


def audit_client(*, noise_multiplier: float = 1.0, clip_norm: float = 1.0, threshold: int = 3, dimension: int = 4,
                 delta: float = 1e-3, runs: int = 20_000, seed: int = 1,
                 noise_std_factor: float = 1.0) -> dict[str, object]:
    """One audit of one round of the client-level Gaussian (q = 1): the tight accountant's (pld) epsilon of
    (1, sigma, 1) against the lower bound from ``runs`` releases per input."""

    accounted = accounting.epsilon(1.0, noise_multiplier, 1, delta, accountant=TIGHT_ACCOUNTANT).epsilon
    mechanism = pool_mechanism(noise_multiplier, clip_norm, threshold, dimension, noise_std_factor)
    without, with_ = scores(mechanism, clip_norm=clip_norm, dimension=dimension, runs=runs, seed=seed)
    return {
        "mechanism": "client",
        "noise_multiplier": noise_multiplier,
        "clip_norm": clip_norm,
        "threshold": threshold,
        "dimension": dimension,
        "noise_std_factor": noise_std_factor,
        **audit_summary(accounted, without, with_, delta, accountant=TIGHT_ACCOUNTANT, notion=UNITS["client"].label),
    }
