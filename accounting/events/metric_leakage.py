"""Metric (d-)privacy leakage of local releases: a different notion (docs/accounting.md §11.4).

A mechanism R is L-d-private if P[R(x1) in S] <= exp(L d(x1, x2)) P[R(x2) in S]; with the
Euclidean distance and the Laplace mechanism in R^n of the metric-privacy design
(noise ``nu * ||delta||``, privacy parameter ``n / (nu ||delta||)``), a client's release
leaks ``n / nu`` per participation within the radius of its own update. Independent
d-private releases compose by addition (the paper's Theorem 3.1).

This is not (epsilon, delta)-DP: it has no delta, its guarantee scales with the distance
between secrets, and the secret is a model update, not a client's presence. So no
(epsilon, delta) accountant accepts this event; :func:`accounting.metric.metric_leakage`
adds it up.
"""

from __future__ import annotations

from typing import Literal

from accounting.events.base import MetricEvent
from accounting.validation import Epsilon, Steps, validate_count, validate_positive


class MetricLeakage(MetricEvent):
    """``participations`` releases, each leaking ``leakage_per_participation``."""

    kind: Literal["metric_leakage"] = "metric_leakage"
    leakage_per_participation: Epsilon  # a positive finite number
    participations: Steps

    def leakage(self) -> float:
        """leakage_per_participation * participations (additive composition)."""
        return self.leakage_per_participation * self.participations

    @classmethod
    def laplace(cls, model_dim: int, noise_multiplier: float, participations: int = 1) -> MetricLeakage:
        """The n-dimensional Laplace release with relative noise ``nu``: ``n / nu`` per participation."""
        n = validate_count("model_dim", model_dim)
        nu = validate_positive("noise_multiplier", noise_multiplier)
        return cls(leakage_per_participation=n / nu, participations=validate_count("participations", participations))
