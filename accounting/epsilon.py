"""Privacy spent: epsilon of one phase or of a history of events (docs/accounting.md §3-§6, §12)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accounting.accountants import ACCOUNTANTS, Accountant, AccountantName, get_accountant
from accounting.errors import InvalidInputError
from accounting.events import ComposedEvent, PoissonSampledGaussian
from accounting.results import EpsilonReport
from accounting.validation import validate_count, validate_delta, validate_noise_multiplier, validate_sampling_rate


def epsilon(
    sampling_rate: float,
    noise_multiplier: float,
    rounds: int,
    delta: float,
    accountant: AccountantName = "rdp",
    *,
    time_limit_s: float | None = None,
) -> EpsilonReport:
    """Epsilon at ``delta`` of ``rounds`` rounds of the sampled Gaussian (docs/accounting.md §1-§6).

    ``time_limit_s`` bounds a prv computation (default ``prv.EPSILON_TIME_LIMIT_S``).
    """
    phase = PoissonSampledGaussian.model_construct(
        sampling_rate=validate_sampling_rate(sampling_rate),
        noise_multiplier=validate_noise_multiplier(noise_multiplier),
        steps=validate_count("rounds", rounds),
    )
    delta = validate_delta(delta)
    return get_accountant(accountant).epsilon([phase], delta, time_limit_s=time_limit_s)


def epsilon_of_events(
    events: Sequence[Any] | ComposedEvent,
    delta: float,
    accountant: AccountantName = "rdp",
    *,
    time_limit_s: float | None = None,
) -> EpsilonReport:
    """Epsilon of events composed in order (docs/accounting.md §4, §5, §11): RDP curves add; PRV
    composes its events heterogeneously; an accountant that does not compose (closed_form)
    takes a single event. Metric leakage is refused (a different notion, §11.1)."""
    chosen = get_accountant(accountant)
    return chosen.epsilon(_checked_history(chosen, events), validate_delta(delta), time_limit_s=time_limit_s)


def _checked_history(chosen: Accountant, events: Sequence[Any] | ComposedEvent) -> list[Any]:
    """``events`` as ``chosen`` accepts them: at least one, and one only where it does not compose."""
    checked = chosen.accepted_events(events, "events")
    if not checked:
        raise InvalidInputError("events", "must contain at least one event")
    if len(checked) > 1 and not chosen.composes:
        raise InvalidInputError(
            "accountant", f"{chosen.name} describes one phase; use {_composing()} for a history"
        )
    return checked


def epsilons_of_histories(
    histories: Sequence[Sequence[Any]], delta: float, accountant: AccountantName = "rdp"
) -> list[EpsilonReport]:
    """:func:`epsilon_of_events` of each history, with the same checks, answered in one call
    to the accountant (rdp vectorises it: docs/accounting.md §4, docs/planning.md §8)."""
    chosen = get_accountant(accountant)
    delta = validate_delta(delta)
    return chosen.epsilons([_checked_history(chosen, events) for events in histories], delta)


# The name the code used before events existed: a history of phases is a list of events.
epsilon_of_phases = epsilon_of_events


def _composing() -> str:
    return " or ".join(name for name, accountant in ACCOUNTANTS.items() if accountant.composes)
