"""What every privacy event is: a frozen record of one mechanism's parameters (docs/accounting.md §11).

An event says *what was released*, never how much privacy it cost: the accountants
(:mod:`accounting.accountants`) read events and answer that. This is the shape of Google
dp-accounting's ``DpEvent``, with one difference: an event carries its own count
(``steps``, ``participations``), because every history the project keeps is "this
mechanism, n times".

Each event belongs to one privacy **notion** (docs/accounting.md §11.1):

- ``approximate_dp``: (epsilon, delta)-DP under add/remove adjacency; such an event has
  an RDP curve (:meth:`ApproximateDpEvent.rdp`) and every accountant composes it;
- ``metric``: metric (d-)privacy leakage; it composes by addition
  (:func:`accounting.metric.metric_leakage`) and no (epsilon, delta) accountant accepts it.

(pydantic models are ABCs, so the abstract methods below are enforced.) An event kind is a subclass with a ``kind`` field whose only value is its tag in JSON,
registered in ``accounting/events/__init__.py``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
import pydantic

from accounting.validation import InputModel

if TYPE_CHECKING:
    from accounting.rdp import OrderGrid

Notion = Literal["approximate_dp", "metric"]

NOTION_LABELS: dict[Notion, str] = {
    "approximate_dp": "(epsilon, delta)-DP",
    "metric": "metric (d-)privacy leakage",
}


class PrivacyEvent(InputModel):
    """Base of every event kind. ``notion`` is fixed per kind; ``kind`` is the JSON tag."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    notion: ClassVar[Notion]
    kind: str

    @classmethod
    def kind_tag(cls) -> str:
        """The value of ``kind`` for this class (the default of its ``Literal`` field)."""
        return str(cls.model_fields["kind"].default)


class ApproximateDpEvent(PrivacyEvent):
    """An event with (epsilon, delta)-DP guarantees, expressed as its total RDP curve."""

    notion: ClassVar[Notion] = "approximate_dp"

    @abc.abstractmethod
    def rdp(self, grid: OrderGrid) -> np.ndarray:
        """The RDP of the whole event (all its steps) at every order of ``grid`` (docs/accounting.md §4)."""


class MetricEvent(PrivacyEvent):
    """An event whose guarantee is metric (d-)privacy: a leakage that adds up."""

    notion: ClassVar[Notion] = "metric"

    @abc.abstractmethod
    def leakage(self) -> float:
        """The total leakage of the event (all its participations), docs/accounting.md §11.4."""
