"""The privacy audit of the metric Laplace release (docs/secure-aggregation.md §Audit, docs/metric-privacy.md §2).

Runs the real release of :func:`trainer.units.metric.mechanism.sanitize` (public radius r,
Laplace noise of density proportional to exp(-eps ||x||) with eps = n / (nu r)), many times
on two neighbouring inputs: a client's trained model equal to the broadcast model, or at
distance r from it along e_0. Metric privacy bounds the privacy loss between two models by
eps times their distance, so between these two the release is (n / nu)-DP for every delta
(the leakage the ledger counts per participation, ``MetricLeakage.laplace``). The score is
the released model's first coordinate; ``noise_std_factor`` builds the deliberately broken
variant (nu, and so the noise, scaled by that factor).
"""

from __future__ import annotations

import numpy as np

from accounting.audit import audit_summary
from accounting.events import MetricLeakage
from accounting.metric import metric_leakage
from planner.units import UNITS
from trainer.units.metric.mechanism import sanitize


def scores(*, noise_multiplier: float, radius: float, dimension: int, runs: int, seed: int,
           noise_std_factor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(scores at the broadcast model, scores at distance ``radius`` from it), ``runs`` each."""
    rng = np.random.default_rng(seed)
    base = np.zeros(dimension)
    moved = base.copy()
    moved[0] = radius
    out = []
    for trained in (base, moved):
        values = np.empty(runs)
        for run in range(runs):
            # the noise's scale is nu r / n per unit of ||rho||'s mean: nu times the factor scales it
            release = sanitize(trained, base, noise_multiplier * noise_std_factor, rng, radius_rule="public",
                               public_radius=radius)
            values[run] = release.released[0]
        out.append(values)
    return out[0], out[1]


def audit_metric(*, noise_multiplier: float = 0.5, radius: float = 1.0, dimension: int = 1, delta: float = 1e-6,
                 runs: int = 20_000, seed: int = 1, noise_std_factor: float = 1.0) -> dict[str, object]:
    """One audit of one metric Laplace release: the accounted leakage n / nu between two models
    at distance r (pure DP: any delta) against the lower bound from ``runs`` releases per input."""

    accounted = metric_leakage([MetricLeakage.laplace(dimension, noise_multiplier)])
    without, with_ = scores(noise_multiplier=noise_multiplier, radius=radius, dimension=dimension, runs=runs,
                            seed=seed, noise_std_factor=noise_std_factor)
    return {
        "mechanism": "metric",
        "noise_multiplier": noise_multiplier,
        "radius": radius,
        "dimension": dimension,
        "noise_std_factor": noise_std_factor,
        **audit_summary(accounted, without, with_, delta, accountant=None, notion=UNITS["metric_local"].label, figure=UNITS["metric_local"].figure),
    }
