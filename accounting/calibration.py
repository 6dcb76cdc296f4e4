"""Inverse questions: the noise multiplier, sampling rate or rounds that meet a target.

docs/accounting.md §7, §12. The public functions validate their inputs, take the
accountant from the registry (:mod:`accounting.accountants`) and ask it; the searches
live with the accountants, the root finders in :mod:`accounting.search`, the PRV fence in
:mod:`accounting.prv`. Every answer comes from a proven bracket and is the evaluated,
feasible end of it, so the returned value never exceeds the target under the accountant
that produced it. With ``spent`` events the question is about the remaining budget: the
new phase is composed after them (docs/accounting.md §7.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from accounting import closed_form
from accounting.accountants import ACCOUNTANTS, AccountantName, RdpAccountant, get_accountant
from accounting.accountants.base import RATE_MIN, REL_TOL, ROUNDS_MAX, SIGMA_MAX, SIGMA_MIN, Accountant
from accounting.errors import InfeasibleError, InvalidInputError
from accounting.events import ApproximateDpEvent, ComposedEvent
from accounting.results import Calibration
from accounting.validation import (
    validate_count,
    validate_delta,
    validate_noise_multiplier,
    validate_positive,
    validate_sampling_rate,
)

__all__ = [
    "RATE_MIN",
    "REL_TOL",
    "ROUNDS_MAX",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "closed_form_noise_multiplier",
    "noise_multiplier",
    "noise_multipliers",
    "noise_multipliers_batch",
    "noise_multipliers_rdp",
    "rounds",
    "sampling_rate",
]

Spent = Sequence[Any] | ComposedEvent


def closed_form_noise_multiplier(sampling_rate: float, rounds: int, epsilon: float, delta: float) -> float:
    """The GDPFed paper's raw bound sqrt(7 q^2 T (eps + 2 ln(1/delta))) / eps (docs/accounting.md §6).

    Unchecked: it under-noises outside its lemma's conditions. Use
    ``noise_multiplier(..., accountant="closed_form")`` for the checked answer.
    """
    q = validate_sampling_rate(sampling_rate)
    t = validate_count("rounds", rounds)
    eps = validate_positive("epsilon", epsilon)
    return closed_form.closed_form_sigma(q, t, eps, validate_delta(delta))


def _sigma_question(
    sampling_rate: float, rounds: int, epsilon: float, delta: float, accountant: AccountantName
) -> tuple[float, int, float, float, Accountant]:
    """A noise-multiplier question's values, validated in the order their errors are named, and
    its accountant."""
    return (
        validate_sampling_rate(sampling_rate),
        validate_count("rounds", rounds),
        validate_positive("epsilon", epsilon),
        validate_delta(delta),
        get_accountant(accountant),
    )


def noise_multiplier(
    sampling_rate: float,
    rounds: int,
    epsilon: float,
    delta: float,
    accountant: AccountantName = "rdp",
    *,
    spent: Spent = (),
    raw: bool = False,
    time_limit_s: float | None = None,
) -> Calibration:
    """Smallest sigma (relative tolerance 1e-4) with eps(spent + (q, sigma, T)) <= epsilon.

    docs/accounting.md §7.1 (rdp), §7.2 (prv, calibrated on the PRV upper bound), §6.2 (closed_form:
    the formula, checked by rdp and replaced by the rdp sigma when it misses the target,
    unless ``raw``). Raises InfeasibleError when the spent events alone exceed the target
    or when sigma would exceed ``SIGMA_MAX``.
    """
    q, t, eps, delta, chosen = _sigma_question(sampling_rate, rounds, epsilon, delta, accountant)
    if not isinstance(raw, bool):
        raise InvalidInputError("raw", "must be true or false")
    if raw and not chosen.raw_formula:
        names = ", ".join(f"accountant={name!r}" for name, a in ACCOUNTANTS.items() if a.raw_formula)
        raise InvalidInputError("raw", f"only applies to {names}")
    events = _spent(chosen, spent)
    return chosen.noise_multiplier(q, t, eps, delta, events, raw=raw, time_limit_s=time_limit_s)


def noise_multiplier_exists(
    sampling_rate: float,
    rounds: int,
    epsilon: float,
    delta: float,
    accountant: AccountantName = "rdp",
    *,
    spent: Spent = (),
) -> bool:
    """Whether :func:`noise_multiplier` with the same arguments returns rather than raising
    InfeasibleError: some sigma up to ``SIGMA_MAX`` meets ``epsilon`` after ``spent``
    (docs/accounting.md §7.9). pld answers from one composition at its search's top point
    instead of the search; the answer is the same. Invalid input is refused as by
    :func:`noise_multiplier`."""
    q, t, eps, delta, chosen = _sigma_question(sampling_rate, rounds, epsilon, delta, accountant)
    return chosen.noise_multiplier_exists(q, t, eps, delta, _spent(chosen, spent))


def noise_multipliers(
    questions: Sequence[tuple[float, int, float, float]],
    accountant: AccountantName = "rdp",
    *,
    spent: Sequence[Spent] | None = None,
    starts: Sequence[float | None] | None = None,
) -> list[Calibration | InfeasibleError]:
    """:func:`noise_multiplier` of every (sampling_rate, rounds, epsilon, delta) in ``questions``
    (each with ``spent[i]`` events, if given), in one call: entry i is the Calibration that
    ``noise_multiplier(*questions[i], accountant, spent=spent[i])`` returns, or the
    InfeasibleError it raises, the same answer bit for bit (docs/accounting.md §7.7).

    pld runs the searches in lockstep and composes each round's candidate sigmas together
    (one batched FFT composition per round instead of one per question, §13.7); the other
    accountants answer one question at a time. ``starts[i]``: a noise multiplier a neighbouring
    question answered (the discrete blocks' re-calibration starts from the continuous answer),
    where pld's search for question i starts (§13.5); None entries start from its guess. A start
    changes how many evaluations the search takes, not its answer, where epsilon does not rise
    with sigma, and never makes an answer unsound. An invalid value is refused naming it, e.g.
    ``questions[2].epsilon``.
    """
    chosen = get_accountant(accountant)
    if isinstance(questions, (str, bytes)) or not isinstance(questions, Sequence):
        raise InvalidInputError("questions", "must be a list of (sampling_rate, rounds, epsilon, delta)")
    if spent is not None and (not isinstance(spent, Sequence) or len(spent) != len(questions)):
        raise InvalidInputError("spent", f"must be a list of one event list per question ({len(questions)})")
    if starts is not None and (not isinstance(starts, Sequence) or len(starts) != len(questions)):
        raise InvalidInputError("starts", f"must be a list of one noise multiplier or null per question ({len(questions)})")
    checked_starts = [
        None if starts is None or starts[i] is None else validate_positive(f"starts[{i}]", starts[i])
        for i in range(len(questions))
    ]
    by_delta: dict[float, list[int]] = {}
    checked: list[tuple[float, int, float, list[ApproximateDpEvent]]] = []
    for i, question in enumerate(questions):
        name = f"questions[{i}]"
        if not isinstance(question, Sequence) or len(question) != 4:
            raise InvalidInputError(name, "must be (sampling_rate, rounds, epsilon, delta)")
        q = validate_sampling_rate(question[0], f"{name}.sampling_rate")
        t = validate_count(f"{name}.rounds", question[1])
        eps = validate_positive(f"{name}.epsilon", question[2])
        delta = validate_delta(question[3], f"{name}.delta")
        events = _spent(chosen, spent[i] if spent is not None else (), f"spent[{i}]")
        checked.append((q, t, eps, events))
        by_delta.setdefault(delta, []).append(i)
    out: list[Calibration | InfeasibleError | None] = [None] * len(checked)
    for delta, members in by_delta.items():
        answers = chosen.noise_multipliers(
            [checked[i] for i in members], delta, None if starts is None else [checked_starts[i] for i in members]
        )
        for i, answer in zip(members, answers, strict=True):
            out[i] = answer
    return [answer for answer in out if answer is not None]


def sampling_rate(
    noise_multiplier: float,
    rounds: int,
    epsilon: float,
    delta: float,
    accountant: AccountantName = "rdp",
    *,
    spent: Spent = (),
    time_limit_s: float | None = None,
) -> Calibration:
    """Largest q in (0, 1] (relative tolerance 1e-4) meeting the target (docs/accounting.md §7.3).

    Raises InfeasibleError if even q = ``RATE_MIN`` exceeds it.
    """
    sigma = validate_noise_multiplier(noise_multiplier)
    t = validate_count("rounds", rounds)
    eps = validate_positive("epsilon", epsilon)
    delta = validate_delta(delta)
    chosen = get_accountant(accountant)
    return chosen.sampling_rate(sigma, t, eps, delta, _spent(chosen, spent), time_limit_s=time_limit_s)


def rounds(
    sampling_rate: float,
    noise_multiplier: float,
    epsilon: float,
    delta: float,
    accountant: AccountantName = "rdp",
    *,
    spent: Spent = (),
    time_limit_s: float | None = None,
) -> Calibration:
    """Most rounds T (0 allowed) with eps(spent + (q, sigma, T)) <= epsilon (docs/accounting.md §7.4).

    With T = 0 the achieved epsilon is that of the spent events (0 without any) and
    ``reason`` says that not even one round fits. Raises InfeasibleError if the spent
    events alone exceed the target.
    """
    q = validate_sampling_rate(sampling_rate)
    sigma = validate_noise_multiplier(noise_multiplier)
    eps = validate_positive("epsilon", epsilon)
    delta = validate_delta(delta)
    chosen = get_accountant(accountant)
    return chosen.rounds(q, sigma, eps, delta, _spent(chosen, spent), time_limit_s=time_limit_s)


def noise_multipliers_batch(
    sampling_rates: np.ndarray, rounds: int, epsilons: np.ndarray, delta: float, accountant: AccountantName = "rdp"
) -> np.ndarray | None:
    """Vectorised calibration: sigma for every (q, eps) of the broadcast arrays, or None when
    ``accountant`` has no batch calibration (ask :func:`noise_multiplier` point by point).

    rdp has one: the same search as :func:`noise_multiplier` (docs/accounting.md §7.1, §7.6),
    run for all points at once: every finite returned sigma meets its target under rdp (it
    is the evaluated feasible end of its own bracket). A point that no sigma up to
    ``SIGMA_MAX`` satisfies gets ``inf``; a point met already at ``SIGMA_MIN`` gets
    ``SIGMA_MIN``. Returns an array of the broadcast shape.
    """
    q_in = _finite_array("sampling_rates", sampling_rates)
    eps_in = _finite_array("epsilons", epsilons)
    if np.any((q_in <= 0) | (q_in > 1)):
        raise InvalidInputError("sampling_rates", "every value must be in (0, 1]")
    if np.any(eps_in <= 0):
        raise InvalidInputError("epsilons", "every value must be > 0")
    t = validate_count("rounds", rounds)
    delta = validate_delta(delta)
    chosen = get_accountant(accountant)
    q_b, eps_b = np.broadcast_arrays(q_in, eps_in)
    sigmas = chosen.noise_multipliers_batch(q_b.reshape(-1).astype(float), t, eps_b.reshape(-1).astype(float), delta)
    return None if sigmas is None else sigmas.reshape(q_b.shape)


def noise_multipliers_rdp(
    sampling_rates: np.ndarray, rounds: int, epsilons: np.ndarray, delta: float
) -> np.ndarray:
    """:func:`noise_multipliers_batch` under rdp (which always has one)."""
    sigmas = noise_multipliers_batch(sampling_rates, rounds, epsilons, delta, _RDP.name)
    assert sigmas is not None
    return sigmas


_RDP = RdpAccountant()


def _spent(chosen: Accountant, spent: Spent, field: str = "spent") -> list[ApproximateDpEvent]:
    events = chosen.accepted_events(spent, field)
    if events and not chosen.composes:
        composing = " or ".join(name for name, a in ACCOUNTANTS.items() if a.composes)
        raise InvalidInputError(field, f"{chosen.name} cannot account for spent events; use {composing}")
    return events


def _finite_array(field: str, values: object) -> np.ndarray:
    if isinstance(values, bool):
        raise InvalidInputError(field, "must be an array of numbers, not a boolean")
    try:
        array = np.asarray(values)
    except (TypeError, ValueError):
        raise InvalidInputError(field, "must be an array of numbers") from None
    if array.dtype == bool or not np.issubdtype(array.dtype, np.number):
        raise InvalidInputError(field, "must be an array of numbers")
    array = array.astype(float)
    if not np.all(np.isfinite(array)):
        raise InvalidInputError(field, "every value must be finite")
    return array
