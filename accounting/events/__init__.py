"""Privacy events and their registry (docs/accounting.md §11).

An event records what a mechanism released (its parameters and count); accountants
(:mod:`accounting.accountants`) turn a list of them into a privacy figure. Adding an
event kind is one file in this package (a subclass of :class:`ApproximateDpEvent` with an
``rdp`` curve, or of :class:`MetricEvent` with a ``leakage``) plus its line in
``EVENT_KINDS`` below; :data:`AnyEvent` (the tagged union used in requests and documents)
and :func:`validate_events` follow from the registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Union

import pydantic

from accounting.errors import InvalidInputError, validation_error_location, validation_error_message
from accounting.events.base import NOTION_LABELS, ApproximateDpEvent, MetricEvent, Notion, PrivacyEvent
from accounting.events.composed import ComposedEvent
from accounting.events.metric_leakage import MetricLeakage
from accounting.events.poisson_sampled_gaussian import Phase, PoissonSampledGaussian
from accounting.events.poisson_sampled_skellam import PoissonSampledSkellam
from accounting.events.zcdp import ZeroConcentratedDp

# The registry: every event kind by its JSON tag.
EVENT_KINDS: dict[str, type[PrivacyEvent]] = {
    cls.kind_tag(): cls
    for cls in (
        PoissonSampledGaussian,
        ZeroConcentratedDp,
        PoissonSampledSkellam,
        MetricLeakage,
    )
}

# An event written without "kind" (every phase of a schema version 1 plan) is this kind.
UNTAGGED_KIND = PoissonSampledGaussian.kind_tag()


def _kind_of(value: Any) -> Any:
    if isinstance(value, dict):
        return value.get("kind", UNTAGGED_KIND)
    return getattr(value, "kind", UNTAGGED_KIND)


if TYPE_CHECKING:
    AnyEvent = PrivacyEvent
else:
    AnyEvent = Annotated[
        Union[tuple(Annotated[cls, pydantic.Tag(tag)] for tag, cls in EVENT_KINDS.items())],  # noqa: UP007
        pydantic.Discriminator(
            _kind_of,
            custom_error_type="invalid_kind",
            custom_error_message=f"kind must be one of {', '.join(EVENT_KINDS)} (none: {UNTAGGED_KIND})",
        ),
    ]

_EVENT: pydantic.TypeAdapter[PrivacyEvent] = pydantic.TypeAdapter(AnyEvent)


def validate_events(events: Sequence[Any] | ComposedEvent, field: str) -> list[PrivacyEvent]:
    """Events (instances, compositions, or mappings of their fields) as validated events.

    Compositions are flattened. An error names the element and field, e.g.
    ``spent[1].steps``. Notions are checked by the consumer: an accountant refuses metric
    leakage, :func:`accounting.metric.metric_leakage` refuses (epsilon, delta) events.
    """
    if isinstance(events, ComposedEvent):
        return list(events)
    if isinstance(events, (str, bytes)) or not isinstance(events, Sequence):
        raise InvalidInputError(field, "must be a list of events")
    result: list[PrivacyEvent] = []
    for index, event in enumerate(events):
        name = f"{field}[{index}]"
        if isinstance(event, ComposedEvent):
            result.extend(event)
            continue
        if isinstance(event, PrivacyEvent):
            result.append(event)
            continue
        if isinstance(event, pydantic.BaseModel):
            event = event.model_dump()
        try:
            result.append(_EVENT.validate_python(event))
        except pydantic.ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            loc = validation_error_location(first.get("loc", ()))
            if loc and loc[0] in EVENT_KINDS:
                loc = loc[1:]  # the union's tag, not a field
            raise InvalidInputError(f"{name}.{'.'.join(loc)}" if loc else name, validation_error_message(first)) from None
    return result


__all__ = [
    "EVENT_KINDS",
    "NOTION_LABELS",
    "UNTAGGED_KIND",
    "AnyEvent",
    "ApproximateDpEvent",
    "ComposedEvent",
    "MetricEvent",
    "MetricLeakage",
    "Notion",
    "Phase",
    "PoissonSampledGaussian",
    "PoissonSampledSkellam",
    "PrivacyEvent",
    "ZeroConcentratedDp",
    "validate_events",
]
