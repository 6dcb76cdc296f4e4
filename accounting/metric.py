"""Metric (d-)privacy leakage: composition by addition (docs/accounting.md §11.4).

The other notion the project reports. Independent d-private releases with leakages
L_1, ..., L_k compose to L_1 + ... + L_k; there is no delta and nothing to optimise, so
this is a sum, kept apart from the (epsilon, delta) accountants: a figure from here is
never added to, compared with or converted into an epsilon. No torch: the trainer's
metric ledger and the planner both call this.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from accounting.errors import InvalidInputError
from accounting.events import NOTION_LABELS, ComposedEvent, MetricEvent, validate_events


def metric_leakage(events: Sequence[Any] | ComposedEvent, field: str = "events") -> float:
    """Total metric leakage of ``events``: the sum of their leakages (0 for none).

    Refuses any (epsilon, delta) event with an error naming it: the two notions never mix.
    """
    total = 0.0
    for index, event in enumerate(validate_events(events, field)):
        if not isinstance(event, MetricEvent):
            raise InvalidInputError(
                f"{field}[{index}]",
                f"a {event.kind} event is {NOTION_LABELS[event.notion]}, not {NOTION_LABELS['metric']}; "
                "the two notions are never added together",
            )
        total += event.leakage()
    if not math.isfinite(total):
        raise InvalidInputError(field, "the total leakage is not finite")
    return total


def laplace_log_normaliser(dim: int, epsilon: float) -> float:
    """``log K`` of the Laplace density ``K exp(-epsilon ||x - x0||)`` in ``R^dim`` (docs/metric-privacy.md §2).

    ``K = epsilon^n Gamma(n/2) / (2 pi^(n/2) Gamma(n))`` (the paper's Prop. 3.1): the
    surface of the unit sphere ``2 pi^(n/2) / Gamma(n/2)`` times ``int r^(n-1) exp(-eps r) dr
    = Gamma(n) / eps^n`` is ``1 / K``.
    """
    if dim < 1 or not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidInputError("laplace", f"needs dim >= 1 and a positive finite epsilon, got {dim}, {epsilon}")
    return (
        dim * math.log(epsilon) + math.lgamma(dim / 2) - math.log(2.0) - (dim / 2) * math.log(math.pi) - math.lgamma(dim)
    )


def laplace_log_density(x: Sequence[float], center: Sequence[float], epsilon: float) -> float:
    """``log p(x | center) = log K - epsilon ||x - center||`` (docs/metric-privacy.md §2).

    By the triangle inequality ``log p(x | a) - log p(x | b) <= epsilon ||a - b||``: the
    mechanism is epsilon-d-private for the Euclidean distance (the paper's eq. (10)).
    """
    if len(x) != len(center):
        raise InvalidInputError("x", f"x has {len(x)} coordinates, center {len(center)}")
    distance = math.sqrt(sum((a - b) ** 2 for a, b in zip(x, center)))
    return laplace_log_normaliser(len(x), epsilon) - epsilon * distance
