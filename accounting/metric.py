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
