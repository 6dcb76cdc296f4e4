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
import pydantic_core
from pydantic_core import PydanticCustomError

from accounting.errors import InvalidInputError, unknown_field_message


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


# A noise multiplier's domain (docs/accounting.md §9): beyond it its square underflows to 0 or
# overflows, which the accountants' formulas divide by or raise; no answer changes inside it
# (below 1e-100 every accountant's epsilon is inf or the sampled-never 0, above 1e100 it is 0)
NOISE_MULTIPLIER_MIN = 1e-100
NOISE_MULTIPLIER_MAX = 1e100


def _noise_multiplier_in_range(value: float) -> float:
    """After pydantic's checks: within [NOISE_MULTIPLIER_MIN, NOISE_MULTIPLIER_MAX], said in
    those words (pydantic's own ge/le message writes 1e-100 out in 100 digits)."""
    if not NOISE_MULTIPLIER_MIN <= value <= NOISE_MULTIPLIER_MAX:
        raise ValueError(f"must be in [{NOISE_MULTIPLIER_MIN:g}, {NOISE_MULTIPLIER_MAX:g}], got {value:g}")
    return value


def validate_noise_multiplier(value: Any, field: str = "noise_multiplier") -> float:
    """A real noise multiplier within [NOISE_MULTIPLIER_MIN, NOISE_MULTIPLIER_MAX] (the library's
    check, the same words as the ``NoiseMultiplier`` type's), else ``InvalidInputError`` naming ``field``."""
    result = validate_real(field, value)
    try:
        return _noise_multiplier_in_range(result)
    except ValueError as exc:
        raise InvalidInputError(field, str(exc)) from None


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
    float,
    pydantic.BeforeValidator(finite_number),
    pydantic.Field(gt=0, allow_inf_nan=False),
    pydantic.AfterValidator(_noise_multiplier_in_range),
]
PositiveReal = Annotated[
    float, pydantic.BeforeValidator(finite_number), pydantic.Field(gt=0, allow_inf_nan=False)
]
Epsilon = Annotated[
    float, pydantic.BeforeValidator(finite_number), pydantic.Field(gt=0, allow_inf_nan=False)
]
Delta = Annotated[
    float, pydantic.BeforeValidator(finite_number), pydantic.Field(gt=0, lt=1, allow_inf_nan=False)
]
Steps = Annotated[int, pydantic.BeforeValidator(reject_bool), pydantic.Field(ge=1)]


# The core-schema types of a number: each gets reject_bool in front (NumbersModel).
_NUMBER_SCHEMAS = frozenset({"int", "float", "decimal"})
# Entries of a core schema that hold no validation schema (or one a before-validator may not wrap).
_NOT_VALIDATION = frozenset({"metadata", "serialization", "default", "ref", "json_schema_input_schema"})


def _numbers_refuse_booleans(schema: Any) -> Any:
    """A copy of the core ``schema`` with :func:`reject_bool` before every number's schema."""
    if isinstance(schema, list):
        return [_numbers_refuse_booleans(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: value if key in _NOT_VALIDATION else _numbers_refuse_booleans(value) for key, value in schema.items()}
    kind = out.get("type")
    numeric_literal = kind == "literal" and any(
        isinstance(value, (int, float)) and not isinstance(value, bool) for value in out.get("expected", ())
    )
    if kind == "float" and any(bound in out for bound in ("gt", "ge", "lt", "le")):
        return pydantic_core.core_schema.no_info_before_validator_function(_bounded_float, out)
    if kind in _NUMBER_SCHEMAS or numeric_literal:
        return pydantic_core.core_schema.no_info_before_validator_function(reject_bool, out)
    return out


def _bounded_float(value: Any) -> Any:
    """Before a bounded float's checks: :func:`reject_bool`, and NaN refused as ``must be a
    finite number`` (no bound admits NaN, and pydantic's 'Input should be greater than 0'
    misleads for ``--lr nan``). Infinities are left to the bounds, so nothing accepted before
    is refused now (docs/architecture.md §Errors)."""
    value = reject_bool(value)
    if isinstance(value, (str, int, float)):
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            return value  # pydantic reports it
        if math.isnan(number):
            raise ValueError("must be a finite number")
    return value


class NumbersModel(pydantic.BaseModel):
    """A model none of whose numbers takes a boolean: every ``int``, ``float`` and numeric
    ``Literal`` in its fields, at any depth of their types (``dict[str, float]``,
    ``list[int] | None``), refuses ``true``/``false`` with ``must be a number, not a boolean``.

    pydantic's lax mode reads ``True`` as 1, so ``"epsilon": true`` was a budget of 1; strict
    mode would fix that but also refuse ``"1e-5"``, which YAML hands over as a string. So the
    model's schema is rewritten once, when the class is built: each number's schema gets
    :func:`reject_bool` in front (docs/architecture.md §Errors). Nested models keep their own
    schema, so each model of a document derives from this class (plans, events) or from
    :class:`InputModel` (what users write)."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: pydantic.GetCoreSchemaHandler) -> Any:
        return _numbers_refuse_booleans(handler(source))


class InputModel(NumbersModel):
    """The base of every model of external input (scenarios, changes, request bodies,
    experiment configurations, training options): numbers refuse booleans
    (:class:`NumbersModel`), and a key no field takes is an error, named with the field the
    user probably meant (``unknown field 'detla'; did you mean 'delta'?``, among the names and
    aliases the input did not give), in place of pydantic's ``Extra inputs are not permitted``
    and of the ``Field required`` of the field the typo replaced. The input's other errors
    follow it (docs/architecture.md §Errors)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _unknown_fields(cls, data: Any, handler: pydantic.ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(data, dict) or cls.model_config.get("extra") != "forbid":
            return handler(data)
        known = cls._input_names()
        unknown = [key for key in data if key not in known]
        if not unknown:
            return handler(data)
        candidates = sorted(known - data.keys())
        errors: list[Any] = []
        suggested: set[str] = set()
        for key in unknown:
            message, suggestion = unknown_field_message(str(key), candidates)
            if suggestion is not None:
                suggested.add(suggestion)
            errors.append({"type": PydanticCustomError("extra_forbidden", message), "loc": (key,), "input": data[key]})
        try:
            handler({key: value for key, value in data.items() if key in known})
        except pydantic.ValidationError as exc:
            for error in exc.errors(include_url=False):
                if error["type"] == "missing" and len(error["loc"]) == 1 and error["loc"][0] in suggested:
                    continue  # the typo's own field: the suggestion names it
                # kept verbatim (type, message, location): PydanticCustomError does not format
                # a message given without a context
                errors.append({"type": PydanticCustomError(error["type"], error["msg"]), "loc": error["loc"],
                               "input": error.get("input")})
        raise pydantic.ValidationError.from_exception_data(cls.__name__, errors)

    @classmethod
    def _input_names(cls) -> frozenset[str]:
        """The keys a field of this model takes: names and aliases (computed once per class)."""
        names = _INPUT_NAMES.get(cls)
        if names is None:
            found = set(cls.model_fields)
            for field in cls.model_fields.values():
                for alias in (field.alias, field.validation_alias):
                    if isinstance(alias, str):
                        found.add(alias)
            names = _INPUT_NAMES[cls] = frozenset(found)
        return names


_INPUT_NAMES: dict[type, frozenset[str]] = {}


# A switch that changes privacy or behaviour (opt out, raw closed form, adaptive clipping)
# is a JSON boolean: pydantic's lax mode would read "yes", "on", 1 or even "false" as one,
# and "yes" once opted a group out of DP. Strict mode takes only true/false.
Flag = Annotated[bool, pydantic.Field(strict=True)]
