"""The privacy audit of the discrete pipeline (docs/secure-aggregation.md §Audit).

Runs the real client and server arithmetic of :mod:`trainer.secagg.discrete` (clip,
scale, rotate, conditionally round, add a Skellam share, encode mod 2^b, sum mod 2^b,
decode, unrotate, rescale) for a target client and the other participants, many times
on two neighbouring inputs: the target's update present, or zeroed (its share still
sent, as the accounting assumes: docs/secure-aggregation.md §Discrete noise). The score
is the released sum's projection on the target's update; :func:`accounting.audit.epsilon_lower_bound`
turns the two samples into a lower bound on epsilon. ``noise_std_factor`` and
``conditional`` build the deliberately broken variants the audit must catch.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import accounting
from accounting.accountants import TIGHT_ACCOUNTANT
from accounting.audit import epsilon_lower_bound
from accounting.events import PoissonSampledSkellam
from planner.discrete import bits_for, rounded_l1_bound
from planner.units import UNITS
from trainer.secagg import discrete as dm


def pipeline_scores(
    params: dm.DiscreteParams,
    *,
    clients: int,
    runs: int,
    seed: int,
    noise_std_factor: float = 1.0,
    conditional: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(scores without the target's data, scores with it), ``runs`` each, one round per run."""
    rng = np.random.default_rng(seed)
    signs = dm.rotation_signs(seed, params.dimension)
    target = np.zeros(params.dimension)
    target[0] = params.clip_norm
    others = rng.normal(size=(clients - 1, params.dimension))
    actual = replace(params, share_variance=params.share_variance * noise_std_factor**2)
    bound = params.l2_bound if conditional else float("inf")
    rounded = replace(actual, l2_bound=bound)
    scores = []
    for present in (False, True):
        shares = [dm.client_share(np.broadcast_to(target * present, (runs, params.dimension)), rounded, signs, rng)]
        shares += [
            dm.client_share(np.broadcast_to(other, (runs, params.dimension)), rounded, signs, rng) for other in others
        ]
        released = dm.server_decode(dm.modular_sum(np.stack(shares), params.bits), params, signs)
        scores.append(released @ (target / params.clip_norm))
    return scores[0], scores[1]


def audit_discrete(
    *,
    clients: int = 3,
    dimension: int = 8,
    clip_norm: float = 1.0,
    scale: float = 16.0,
    share_variance: float = 114.0,
    delta: float = 1e-5,
    runs: int = 200_000,
    seed: int = 1,
    noise_std_factor: float = 1.0,
    conditional: bool = True,
) -> dict[str, object]:
    """One audit of the discrete pipeline: the accounted epsilon of one round (q = 1, all clients
    honest) under the tight accountant (pld, the figure of record a pld plan and its ledger state
    for the Skellam event; it was rdp's larger bound), the audited lower bound, and whether the
    bound exceeds it (a violation)."""
    bits, wrap = bits_for(1e-9, clients, clip_norm, scale, dimension, share_variance * noise_std_factor**2)
    params = dm.DiscreteParams.derived(clip_norm, scale, dimension, share_variance, bits)
    event = PoissonSampledSkellam(
        sampling_rate=1.0,
        variance=share_variance * clients,
        l2_sensitivity=params.l2_bound,
        l1_sensitivity=rounded_l1_bound(params.l2_bound, dimension),
        steps=1,
    )
    accounted = accounting.epsilon_of_events([event], delta=delta, accountant=TIGHT_ACCOUNTANT).epsilon
    without, with_ = pipeline_scores(
        params, clients=clients, runs=runs, seed=seed, noise_std_factor=noise_std_factor, conditional=conditional
    )
    result = epsilon_lower_bound(without, with_, delta)
    return {
        "mechanism": "skellam",
        "clients": clients,
        "dimension": dimension,
        "scale": scale,
        "bits": bits,
        "wrap_probability": wrap,
        "share_variance": share_variance,
        "noise_std_factor": noise_std_factor,
        "conditional_rounding": conditional,
        "runs": runs,
        "delta": delta,
        "accountant": TIGHT_ACCOUNTANT,
        "notion": UNITS["client"].label,  # the Skellam pool sum protects clients, as the client unit's figures
        "accounted_epsilon": accounted,
        "epsilon_lower_bound": result.epsilon_lower,
        "confidence": result.confidence,
        "violated": result.epsilon_lower > accounted,
    }
