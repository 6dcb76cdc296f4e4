"""External requests for the accountants: the CLI parses into these, the HTTP service
(``POST /v1/accounting/epsilon|noise-multiplier|sampling-rate|rounds``) validates into them.

Field names are those of :class:`~accounting.results.Calibration` and
:class:`~accounting.results.EpsilonReport`. pydantic rejects NaN, inf, booleans and
out-of-domain values with the field named; :func:`answer` runs the request.
"""

from __future__ import annotations

from typing import Literal

import pydantic

from accounting import calibration
from accounting.epsilon import epsilon_of_phases
from accounting.mechanism import Phase
from accounting.results import Calibration, EpsilonReport
from accounting.validation import Delta, Epsilon, NoiseMultiplier, SamplingRate, Steps

AnyAccountant = Literal["rdp", "prv", "closed_form"]


class _Request(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    delta: Delta
    accountant: AnyAccountant = "rdp"
    spent: list[Phase] = pydantic.Field(default_factory=list)


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
    raw: bool = False

    @pydantic.field_validator("raw", mode="before")
    @classmethod
    def _strict_bool(cls, value: object) -> object:
        if not isinstance(value, bool) and value not in ("true", "false"):
            raise ValueError("must be true or false")
        return value


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
    if isinstance(request, EpsilonRequest):
        phases = [
            *request.spent,
            Phase(
                sampling_rate=request.sampling_rate, noise_multiplier=request.noise_multiplier, steps=request.rounds
            ),
        ]
        return epsilon_of_phases(phases, request.delta, request.accountant)
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
