"""External requests for the accountants: the CLI parses into these, the HTTP service
(``POST /v1/accounting/epsilon|noise-multiplier|sampling-rate|rounds``) validates into them.

Field names are those of :class:`~accounting.results.Calibration` and
:class:`~accounting.results.EpsilonReport`. pydantic rejects NaN, inf, booleans and
out-of-domain values with the field named; :func:`answer` runs the request.
"""

from __future__ import annotations

import pydantic

from accounting.choices import DEFAULT_ACCOUNTANT, AccountantName
from accounting.events import AnyEvent, PoissonSampledGaussian
from accounting.results import Calibration, EpsilonReport
from accounting.validation import Delta, Epsilon, Flag, InputModel, NoiseMultiplier, SamplingRate, Steps


class _Request(InputModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    delta: Delta
    accountant: AccountantName = DEFAULT_ACCOUNTANT
    spent: list[AnyEvent] = pydantic.Field(
        default_factory=list,
        description="events already spent, composed before the question's phase; an event without "
        "'kind' is a poisson_sampled_gaussian phase {sampling_rate, noise_multiplier, steps}",
    )


class EpsilonRequest(_Request):
    """Epsilon of ``rounds`` rounds at (sampling_rate, noise_multiplier), after ``spent``."""

    sampling_rate: SamplingRate
    noise_multiplier: NoiseMultiplier
    rounds: Steps


class NoiseMultiplierRequest(_Request):
    """Smallest noise_multiplier meeting ``epsilon`` over ``rounds`` more rounds."""

    sampling_rate: SamplingRate
    rounds: Steps
    epsilon: Epsilon
    raw: Flag = False


class SamplingRateRequest(_Request):
    """Largest sampling_rate meeting ``epsilon``."""

    noise_multiplier: NoiseMultiplier
    rounds: Steps
    epsilon: Epsilon


class RoundsRequest(_Request):
    """Most rounds meeting ``epsilon``."""

    sampling_rate: SamplingRate
    noise_multiplier: NoiseMultiplier
    epsilon: Epsilon


AccountingRequest = EpsilonRequest | NoiseMultiplierRequest | SamplingRateRequest | RoundsRequest


def answer(request: AccountingRequest) -> EpsilonReport | Calibration:
    """Run a validated request (docs/accounting.md §8, §10)."""
    # start-up time: the accountants load when a valid request is answered, so a question
    # refused for a bad value (`gdpfed account epsilon --delta 2`) exits without them
    from accounting import calibration
    from accounting.accountants import get_accountant
    from accounting.epsilon import epsilon_of_events

    if isinstance(request, EpsilonRequest):
        get_accountant(request.accountant).accepted_events(request.spent, "spent")  # errors name spent[i]
        events = [
            *request.spent,
            PoissonSampledGaussian(
                sampling_rate=request.sampling_rate, noise_multiplier=request.noise_multiplier, steps=request.rounds
            ),
        ]
        return epsilon_of_events(events, request.delta, request.accountant)
    if isinstance(request, NoiseMultiplierRequest):
        return calibration.noise_multiplier(
            request.sampling_rate,
            request.rounds,
            request.epsilon,
            request.delta,
            request.accountant,
            spent=request.spent,
            raw=request.raw,
        )
    if isinstance(request, SamplingRateRequest):
        return calibration.sampling_rate(
            request.noise_multiplier, request.rounds, request.epsilon, request.delta, request.accountant,
            spent=request.spent,
        )
    if isinstance(request, RoundsRequest):
        return calibration.rounds(
            request.sampling_rate, request.noise_multiplier, request.epsilon, request.delta, request.accountant,
            spent=request.spent,
        )
    raise TypeError(f"not an accounting request: {type(request).__name__}")
