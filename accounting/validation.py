"""Input validation shared by every public accounting function (docs/accounting.md §9).

Two front doors reach the same rules: Python callers (``validate_*`` functions, which
raise :class:`~accounting.errors.InvalidInputError` naming the field) and external input
(the pydantic field types below, used by :mod:`accounting.events` and
:mod:`accounting.requests`). Nothing is clamped: a value outside its domain is an error.
"""

from __future__ import annotations

import math
import numbers
from typing import Annotated, Any

import pydantic

from accounting.errors import InvalidInputError


def reject_bool(value: Any) -> Any:
    """pydantic's lax mode reads ``True`` as 1; a boolean is never a privacy parameter."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def finite_number(value: Any) -> Any:
    """Before pydantic's range checks: no booleans, and NaN/inf named as such (otherwise
    ``nan`` would be reported as 'not greater than 0')."""
    value = reject_bool(value)
    if isinstance(value, (str, int, float)):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return value  # pydantic reports it as not a number
        if not math.isfinite(number):
            raise ValueError("must be a finite number")
    return value


def validate_real(field: str, value: Any) -> float:
    """A finite real number (int, float or numpy scalar; not bool, not NaN or inf)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidInputError(field, f"must be a number, got {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise InvalidInputError(field, f"must be finite, got {result}")
    return result


def validate_positive(field: str, value: Any) -> float:
    result = validate_real(field, value)
    if result <= 0:
        raise InvalidInputError(field, f"must be > 0, got {result}")
    return result


def validate_sampling_rate(value: Any, field: str = "sampling_rate") -> float:
    result = validate_real(field, value)
    if not 0 < result <= 1:
        raise InvalidInputError(field, f"must be in (0, 1], got {result}")
    return result


def validate_delta(value: Any, field: str = "delta") -> float:
    result = validate_real(field, value)
    if not 0 < result < 1:
        raise InvalidInputError(field, f"must be in (0, 1), got {result}")
    return result


def validate_count(field: str, value: Any, minimum: int = 1) -> int:
    """An integer >= ``minimum``; integral floats are refused too, so nothing is rounded."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidInputError(field, f"must be an integer, got {type(value).__name__}")
    result = int(value)
    if result < minimum:
        raise InvalidInputError(field, f"must be >= {minimum}, got {result}")
    return result


def validate_accountant(value: Any, allowed: tuple[str, ...], field: str = "accountant") -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidInputError(field, f"must be one of {', '.join(allowed)}, got {value!r}")
    return value


# pydantic field types for external input (CLI, HTTP): same domains as the functions above.
SamplingRate = Annotated[
    float, pydantic.BeforeValidator(finite_number), pydantic.Field(gt=0, le=1, allow_inf_nan=False)
]
NoiseMultiplier = Annotated[
    float, pydantic.BeforeValidator(finite_number), pydantic.Field(gt=0, allow_inf_nan=False)
]
Epsilon = Annotated[
    float, pydantic.BeforeValidator(finite_number), pydantic.Field(gt=0, allow_inf_nan=False)
]
Delta = Annotated[
    float, pydantic.BeforeValidator(finite_number), pydantic.Field(gt=0, lt=1, allow_inf_nan=False)
]
Steps = Annotated[int, pydantic.BeforeValidator(reject_bool), pydantic.Field(ge=1)]
# A switch that changes privacy or behaviour (opt out, raw closed form, adaptive clipping)
# is a JSON boolean: pydantic's lax mode would read "yes", "on", 1 or even "false" as one,
# and "yes" once opted a group out of DP. Strict mode takes only true/false.
Flag = Annotated[bool, pydantic.Field(strict=True)]
