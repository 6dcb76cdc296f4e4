"""What an accountant is: (epsilon, delta) of events, and the three calibrations (docs/accounting.md §12).

Opacus' ``IAccountant`` is the model, with one difference: our accountants are stateless
(a history is a list of events handed in), so the registry holds one instance of each.
Every accountant answers the same four questions; the public functions in
:mod:`accounting.epsilon` and :mod:`accounting.calibration` validate the inputs, pick the
accountant from the registry and check what it declares (the event kinds it supports,
whether it composes a history), so the methods here receive validated values only.

The class attributes say how the rest of the project uses an accountant, so that no code
outside ``accounting/`` branches on accountant names:

- ``verified_by``: whose epsilon is claimed for plans and ledgers of this accountant
  (closed_form -> rdp: the paper's formula is not a bound, docs/accounting.md §6);
- ``per_round``: the fast, sound stand-in used wherever epsilon is evaluated many times
  (per-round logs, screening checks, optimisation tables); prv -> rdp;
- ``tabulated_by``: the accountant whose sigma(q) tables guide plan optimisation
  (prv -> rdp: PRV is far too slow to tabulate, docs/planning.md §4.2);
- ``fallback``: the accountant answering when this one fails (prv -> rdp, §5.3); an
  accountant with a fallback may also disagree slightly between calibration and
  verification, which the planner handles by raising sigma (docs/planning.md §8);
- ``composes``: accounts for a history of several events (closed_form cannot);
- ``runs_in_child``: its work runs in fenced child processes (prv), so a caller may
  overlap several of its questions in threads without contending for the GIL;
- ``raw_formula``: ``noise_multiplier(..., raw=True)`` returns an unchecked formula;
- ``supports``: the event classes it can account for (a base class covers every kind
  derived from it: rdp takes every :class:`ApproximateDpEvent`).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from accounting.choices import AccountantName
from accounting.errors import InvalidInputError
from accounting.events import EVENT_KINDS, NOTION_LABELS, ApproximateDpEvent, ComposedEvent, validate_events
from accounting.results import Calibration, EpsilonReport

# Search limits (docs/accounting.md §7.1): answers outside them are reported, never clamped silently.
SIGMA_MIN = 1e-3
SIGMA_MAX = 1e4
RATE_MIN = 1e-12
ROUNDS_MAX = 10**9
REL_TOL = 1e-4  # relative tolerance of sigma and q
XTOL = math.log1p(REL_TOL)  # the same tolerance on log sigma and -log q


class Accountant(abc.ABC):
    """One accountant. Subclasses set the class attributes and implement the four questions."""

    name: ClassVar[AccountantName]
    verified_by: ClassVar[AccountantName]
    per_round: ClassVar[AccountantName]
    tabulated_by: ClassVar[AccountantName]
    fallback: ClassVar[AccountantName | None] = None
    composes: ClassVar[bool] = True
    runs_in_child: ClassVar[bool] = False
    raw_formula: ClassVar[bool] = False
    supports: ClassVar[tuple[type[ApproximateDpEvent], ...]]

    @abc.abstractmethod
    def epsilon(
        self, events: list[ApproximateDpEvent], delta: float, *, time_limit_s: float | None = None
    ) -> EpsilonReport:
        """Epsilon at ``delta`` of the events composed (docs/accounting.md §3-§6)."""

    def epsilons(self, histories: list[list[ApproximateDpEvent]], delta: float) -> list[EpsilonReport]:
        """:meth:`epsilon` of each history (validated, non-empty); an accountant that can
        answer many at once (rdp) overrides this with a vectorised equivalent."""
        return [self.epsilon(events, delta) for events in histories]

    @abc.abstractmethod
    def noise_multiplier(
        self,
        sampling_rate: float,
        rounds: int,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        raw: bool = False,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """Smallest sigma with eps(spent + (q, sigma, T)) <= target (docs/accounting.md §7.1-§7.2)."""

    @abc.abstractmethod
    def sampling_rate(
        self,
        noise_multiplier: float,
        rounds: int,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """Largest q in (0, 1] meeting the target (docs/accounting.md §7.3)."""

    @abc.abstractmethod
    def rounds(
        self,
        sampling_rate: float,
        noise_multiplier: float,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """Most rounds T (0 allowed) meeting the target (docs/accounting.md §7.4)."""

    def noise_multipliers_batch(
        self, sampling_rates: np.ndarray, rounds: int, epsilons: np.ndarray, delta: float
    ) -> np.ndarray | None:
        """Vectorised sigma for many (q, eps) points without history, or None if this
        accountant has no batch calibration (the caller then asks point by point)."""
        return None

    def noise_slopes(self, epsilons: np.ndarray, rounds: int, delta: float) -> np.ndarray | None:
        """sigma / q per epsilon when this accountant's sigma is exactly linear in q (the
        closed form), for optimisation tables; None otherwise."""
        return None

    def accepted_events(self, events: Sequence[Any] | ComposedEvent, field: str) -> list[ApproximateDpEvent]:
        """Validated events this accountant can account for; a clear error naming the element otherwise.

        Metric leakage is refused by every (epsilon, delta) accountant (docs/accounting.md §11.1).
        """
        checked = validate_events(events, field)
        accepted: list[ApproximateDpEvent] = []
        for index, event in enumerate(checked):
            name = f"{field}[{index}]"
            if not isinstance(event, ApproximateDpEvent):
                raise InvalidInputError(
                    name,
                    f"a {event.kind} event is {NOTION_LABELS[event.notion]}, a different privacy notion: no "
                    f"(epsilon, delta) accountant folds it into an epsilon; add it up with "
                    f"accounting.metric.metric_leakage",
                )
            if not isinstance(event, self.supports):
                kinds = ", ".join(kind for kind, cls in EVENT_KINDS.items() if issubclass(cls, self.supports))
                raise InvalidInputError(
                    name, f"accountant {self.name} does not support {event.kind} events (it supports: {kinds})"
                )
            accepted.append(event)
        return accepted


def rounds_result(
    count: int,
    sampling_rate: float,
    noise_multiplier: float,
    delta: float,
    target: float,
    achieved: float,
    accountant: AccountantName,
    used: AccountantName,
    spent_epsilon: float | None,
) -> Calibration:
    """The Calibration of a rounds question, with the reason for T = 0 or T at the cap."""
    reason = None
    if count == 0:
        reason = "not even one round fits the target; epsilon is that of the spent events" + (
            "" if spent_epsilon is not None else " (none, so 0)"
        )
    elif count >= ROUNDS_MAX:
        reason = f"the search stops at rounds={ROUNDS_MAX}; more may fit"
    return Calibration(
        solved_for="rounds",
        sampling_rate=sampling_rate,
        noise_multiplier=noise_multiplier,
        rounds=count,
        delta=delta,
        target_epsilon=target,
        epsilon=achieved,
        accountant=accountant,
        accountant_used=used,
        reason=reason,
        spent_epsilon=spent_epsilon,
    )
