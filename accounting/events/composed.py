"""A composition of events: a history, applied in order to the same data (docs/accounting.md §11.2).

dp-accounting's ``ComposedDpEvent``. A composition holds one privacy notion only:
(epsilon, delta) events and metric leakage never mix (docs/accounting.md §11.1), so
composing them is refused here, before any accountant sees them. Nested compositions are
flattened: composition is associative.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from accounting.errors import InvalidInputError
from accounting.events.base import NOTION_LABELS, Notion, PrivacyEvent


@dataclass(frozen=True)
class ComposedEvent:
    """Events composed in order; all of one notion (``notion`` is None when empty)."""

    events: tuple[PrivacyEvent, ...]

    def __init__(self, events: Iterable[PrivacyEvent | ComposedEvent]) -> None:
        flat: list[PrivacyEvent] = []
        for event in events:
            if isinstance(event, ComposedEvent):
                flat.extend(event.events)
            elif isinstance(event, PrivacyEvent):
                flat.append(event)
            else:
                raise InvalidInputError("events", f"not a privacy event: {type(event).__name__}")
        notions = {event.notion for event in flat}
        if len(notions) > 1:
            labels = " and ".join(NOTION_LABELS[n] for n in sorted(notions))
            raise InvalidInputError(
                "events", f"a composition mixes {labels}; different privacy notions are never composed together"
            )
        object.__setattr__(self, "events", tuple(flat))

    @property
    def notion(self) -> Notion | None:
        return self.events[0].notion if self.events else None

    def __iter__(self) -> Iterator[PrivacyEvent]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)
