"""The mechanism every accountant measures: one phase of the Poisson-subsampled Gaussian.

Each client is included in a round independently with probability ``sampling_rate``;
the sum of clipped updates gets N(0, (noise_multiplier * clip_norm)^2 I); neighbouring
datasets add or remove one client's whole data. A history is a list of phases composed
in order (docs/accounting.md §1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pydantic

from accounting.errors import InvalidInputError
from accounting.validation import NoiseMultiplier, SamplingRate, Steps


class Phase(pydantic.BaseModel, frozen=True):
    """``steps`` rounds at a fixed ``sampling_rate`` and ``noise_multiplier``."""

    model_config = pydantic.ConfigDict(extra="forbid")

    sampling_rate: SamplingRate
    noise_multiplier: NoiseMultiplier
    steps: Steps


def validate_phases(phases: Sequence[Any], field: str) -> list[Phase]:
    """Phases (or mappings of their fields) as validated :class:`Phase` objects.

    An error names the element and field, e.g. ``spent[1].steps``.
    """
    if isinstance(phases, (str, bytes)) or not isinstance(phases, Sequence):
        raise InvalidInputError(field, "must be a list of phases")
    result = []
    for index, phase in enumerate(phases):
        name = f"{field}[{index}]"
        if isinstance(phase, Phase):
            result.append(phase)
            continue
        if isinstance(phase, pydantic.BaseModel):
            phase = phase.model_dump()
        try:
            result.append(Phase.model_validate(phase))
        except pydantic.ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            loc = ".".join(str(part) for part in first.get("loc", ()))
            raise InvalidInputError(f"{name}.{loc}" if loc else name, first["msg"]) from None
    return result
