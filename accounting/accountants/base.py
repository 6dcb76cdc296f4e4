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
- ``calibrates_in_lockstep``: its ``noise_multipliers`` answers many questions together,
  cheaper than one at a time and the same answers bit for bit (pld, docs/accounting.md §13.7);
- ``supports``: the event classes it can account for (a base class covers every kind
  derived from it: rdp takes every :class:`ApproximateDpEvent`).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from accounting.choices import AccountantName
from accounting.errors import InfeasibleError, InvalidInputError
from accounting.events import (
    EVENT_KINDS,
    NOTION_LABELS,
    ApproximateDpEvent,
    ComposedEvent,
    PoissonSampledGaussian,
    validate_events,
)
from accounting.results import Calibration, EpsilonReport, SolvedFor

# Search limits (docs/accounting.md §7.1): answers outside them are reported, never clamped silently.
SIGMA_MIN = 1e-3
SIGMA_MAX = 1e4
RATE_MIN = 1e-12
ROUNDS_MAX = 10**9
REL_TOL = 1e-4  # relative tolerance of sigma and q
XTOL = math.log1p(REL_TOL)  # the same tolerance on log sigma and -log q

# (sampling_rate, noise_multiplier, steps) of one Poisson-subsampled Gaussian phase
PhaseTuple = tuple[float, float, int]


@dataclass(frozen=True)
class History:
    """The spent phases an inverse question composes its new phase after (docs/accounting.md
    §7.5), their epsilon alone (None without any) and ``delta``, the delta they and every new
    phase compose at where it is not the question's: the question's less what the spent events
    add to it (pld's Skellam tail masses, §11.7; 0 or below when they take all of it, and every
    epsilon is then inf). None: the question's delta (:meth:`composed_at`)."""

    phases: list[PhaseTuple]
    spent_epsilon: float | None
    delta: float | None = None

    def composed_at(self, delta: float) -> float:
        """The delta the phases of a question at ``delta`` are composed at."""
        return delta if self.delta is None else self.delta

    def plus(self, sampling_rate: float, noise_multiplier: float, steps: int) -> list[PhaseTuple]:
        """The spent phases followed by the new one."""
        return [*self.phases, (sampling_rate, noise_multiplier, steps)]


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
    calibrates_in_lockstep: ClassVar[bool] = False
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

    def noise_multiplier_exists(
        self, sampling_rate: float, rounds: int, target: float, delta: float, spent: list[ApproximateDpEvent]
    ) -> bool:
        """Whether :meth:`noise_multiplier` of the same question returns rather than raising
        InfeasibleError (some sigma up to ``SIGMA_MAX`` meets the target after ``spent``,
        docs/accounting.md §7.9). Here by asking it; an accountant that can tell from fewer
        evaluations (pld: one composition at the search's top point) overrides this with an
        equivalent answer."""
        try:
            self.noise_multiplier(sampling_rate, rounds, target, delta, spent)
        except InfeasibleError:
            return False
        return True

    def noise_multipliers(
        self,
        questions: Sequence[tuple[float, int, float, list[ApproximateDpEvent]]],
        delta: float,
        starts: Sequence[float | None] | None = None,
    ) -> list[Calibration | InfeasibleError]:
        """:meth:`noise_multiplier` of every (sampling_rate, rounds, target, spent), each entry
        the Calibration or the InfeasibleError that call raises; an accountant that can search
        many at once (pld, docs/accounting.md §13.7) overrides this with a lockstep
        equivalent, answer for answer the same. ``starts`` (a neighbouring answer per question
        that pld's lattice search starts from, §13.5) is ignored here."""
        out: list[Calibration | InfeasibleError] = []
        for q, t, target, spent in questions:
            try:
                out.append(self.noise_multiplier(q, t, target, delta, spent))
            except InfeasibleError as exc:
                out.append(exc)
        return out

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

    def unrepresented(self, events: Sequence[ApproximateDpEvent]) -> str | None:
        """Why this accountant's own method cannot account for ``events`` (its ``fallback``
        answers them, :meth:`history_or_fallback`), or None: an accountant with a fallback
        that represents only some of the kinds it ``supports`` (pld) says which."""
        return None

    def phases(self, events: Sequence[ApproximateDpEvent]) -> list[PhaseTuple]:
        """The Gaussian phases this accountant composes for ``events`` (already accepted and
        not :meth:`unrepresented`): their own (:func:`phase_tuples`); pld overrides this with
        the phase dominating each Skellam event (docs/accounting.md §11.7)."""
        return phase_tuples(events)

    def composition_delta(self, events: Sequence[ApproximateDpEvent], delta: float) -> float:
        """The delta :meth:`phases` of ``events`` are composed at for a question at ``delta``:
        ``delta`` itself; pld overrides this to take the Skellam events' tail masses out (§11.7)."""
        return delta

    def history_or_fallback(
        self,
        spent: Sequence[ApproximateDpEvent],
        delta: float,
        target: float,
        fallback: Callable[[], Calibration],
        epsilon_of: Callable[[list[PhaseTuple]], float],
    ) -> History | Calibration:
        """The first step every inverse question of an accountant with a fallback takes, so that
        each question keeps only its search (docs/accounting.md §7.5, §12): the ``fallback``
        accountant's answer to the same question (``fallback()``), marked ``fallback`` with the
        reason, when :meth:`unrepresented` refuses the spent events; else the spent phases
        (:meth:`phases`), the delta they compose at where it is not ``delta``
        (:meth:`composition_delta`) and their epsilon (``epsilon_of``, at that delta), raising
        InfeasibleError when they alone exceed the target."""
        reason = self.unrepresented(spent)
        if reason:
            return fallback().model_copy(update={"accountant": self.name, "fallback": True, "reason": reason})
        phases = self.phases(spent)
        if not phases:
            return History(phases, None)
        composed_at = self.composition_delta(spent, delta)
        value = epsilon_of(phases)
        if value > target:
            raise spent_exceeds(value, target)
        return History(phases, value, None if composed_at == delta else composed_at)

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


def spent_exceeds(value: float, target: float) -> InfeasibleError:
    """The refusal of a question whose spent events alone exceed its target (docs/accounting.md §7.5)."""
    return InfeasibleError(
        f"the spent events alone have epsilon {value:.6g} > target epsilon {target:g}; nothing is left"
    )


def no_noise_meets(target: float, sampling_rate: float, rounds: int, delta: float) -> InfeasibleError:
    """The refusal of a noise-multiplier question that no sigma up to ``SIGMA_MAX`` answers
    (docs/accounting.md §7.1); one text for every accountant that searches sigma."""
    return InfeasibleError(
        f"no noise_multiplier up to {SIGMA_MAX:g} meets epsilon={target:g} at sampling_rate={sampling_rate:g}, "
        f"rounds={rounds}, delta={delta:g}"
    )


def phase_tuples(events: Sequence[ApproximateDpEvent]) -> list[PhaseTuple]:
    """(q, sigma, steps) of Poisson-subsampled Gaussian events (checked by the caller: the
    accountant's ``supports`` or :meth:`Accountant.unrepresented`)."""
    out = []
    for event in events:
        assert isinstance(event, PoissonSampledGaussian)
        out.append((event.sampling_rate, event.noise_multiplier, event.steps))
    return out


FLOOR_REASON = "the target is met already at the search floor noise_multiplier={floor:g}"
FULL_RATE_REASON = "every client in every round (sampling_rate=1) meets the target"


@dataclass(frozen=True)
class Answered:
    """What the Calibration of a noise-multiplier or a sampling-rate question states whichever
    was solved for (docs/accounting.md §7.1, §7.3): the point found (``sampling_rate``,
    ``noise_multiplier``), the ``rounds`` and ``delta`` asked, the ``target`` epsilon, the
    epsilon ``achieved`` there, the ``accountant`` asked and ``spent_epsilon`` (``None``: no
    spent events). :func:`noise_result` and :func:`rate_result` add the reason."""

    sampling_rate: float
    noise_multiplier: float
    rounds: int
    delta: float
    target: float
    achieved: float
    accountant: AccountantName
    spent_epsilon: float | None

    def calibration(self, solved_for: SolvedFor, reason: str | None, failed: str | None,
                    used: AccountantName | None) -> Calibration:
        """The Calibration solving for ``solved_for``: ``failed``, the reason another accountant
        (``used``) answered, else ``reason``."""
        return Calibration(
            solved_for=solved_for,
            sampling_rate=self.sampling_rate,
            noise_multiplier=self.noise_multiplier,
            rounds=self.rounds,
            delta=self.delta,
            target_epsilon=self.target,
            epsilon=self.achieved,
            accountant=self.accountant,
            accountant_used=used or self.accountant,
            spent_epsilon=self.spent_epsilon,
            fallback=failed is not None,
            reason=failed or reason,
        )


def noise_result(
    answer: Answered, *, at_floor: bool, failed: str | None = None, used: AccountantName | None = None
) -> Calibration:
    """The Calibration of a noise-multiplier question (docs/accounting.md §7.1): ``failed``, the
    reason another accountant (``used``) answered, else why sigma sits at the search floor."""
    return answer.calibration(
        "noise_multiplier", FLOOR_REASON.format(floor=SIGMA_MIN) if at_floor else None, failed, used
    )


def rate_result(answer: Answered, *, failed: str | None = None, used: AccountantName | None = None) -> Calibration:
    """The Calibration of a sampling-rate question (docs/accounting.md §7.3): ``failed``, the
    reason another accountant (``used``) answered, else why q is 1."""
    return answer.calibration(
        "sampling_rate", FULL_RATE_REASON if answer.sampling_rate == 1.0 else None, failed, used
    )


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
