"""The project's error types.

Every error a user can cause is one of these. They are mapped to HTTP status codes and
CLI exit codes in exactly one place each (``app/errors.py`` for HTTP, ``app/cli.py``
for the command line), so the rest of the code raises them and never formats them.

They live in ``accounting`` because it is the bottom of the dependency graph
(``docs/architecture.md``): every other package may import them.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any


class GdpfedError(Exception):
    """Base class of all errors that gdpfed reports to its users."""

    code: str = "gdpfed_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInputError(GdpfedError, ValueError):
    """An input value is outside its domain (eps <= 0, delta not in (0, 1), NaN, ...).

    ``field`` names the offending input the way the user spelled it (``sampling_rate``,
    ``groups[2].epsilon``) so the one-line message can point at it.
    """

    code = "invalid_input"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class InfeasibleError(GdpfedError):
    """The inputs are individually valid but no answer meets them all.

    Examples: a noise multiplier above the search cap would be needed, more expected
    clients than the population holds, a pool that cannot reach its secure-aggregation
    minimum.
    """

    code = "infeasible"


class BudgetConflictError(InvalidInputError):
    """A new budget below what a group has already spent (docs/planning.md §9).

    Privacy already spent cannot be taken back, so such a change is refused everywhere
    with this one rule: HTTP 409 (re-plan and population changes alike), CLI exit 2.
    """

    code = "budget_conflict"


def out_of_float_range(exc: ArithmeticError) -> InfeasibleError:
    """The answer to a computation that valid inputs at the edge of their domains (a noise
    multiplier of 1e300, an epsilon of 1e300) drove out of floating-point range
    (``OverflowError``, ``ZeroDivisionError``): a property of the request, not a fault, so
    the service answers it 422 (``app/compute.py``) and ``gdpfed account`` exits 2 with this
    one line (docs/accounting.md §10)."""
    return InfeasibleError(
        f"the computation left the floating-point range for these inputs ({type(exc).__name__}); "
        "use values of ordinary magnitude"
    )


# pydantic names a union's member in an error's location (``keep_ratio.constrained-float``,
# ``keep_ratios.literal['auto']``, ``value.function-after[...]``): a schema's name, not a field
_UNION_MEMBER_TAG = re.compile(r"^(constrained-[a-z]+|[a-z]+(-[a-z]+)*\[.*\])$", re.DOTALL)
# pydantic's prefixes of a message raised by a validator (``Value error, silo id 'a' appears twice``)
_MESSAGE_PREFIXES = ("Value error, ", "Assertion failed, ")


SHOWN_CHARS = 64


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``value`` as text for a one-line message, cut to ``limit`` characters (``aaaa...(1000
    characters)``): a key or id the user wrote may be a megabyte long, the message stays a line."""
    text = str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...({len(text)} characters)"


MESSAGE_CHARS = 2000


def message_line(message: str) -> str:
    """An error message as the one line the CLI prints and the service answers: line breaks
    (a value the user wrote may hold them) escaped, cut to :data:`MESSAGE_CHARS` (a message may
    quote a value up to the document bounds' 100,000 characters)."""
    return shown(message.replace("\r", "\\r").replace("\n", "\\n"), MESSAGE_CHARS)


def unknown_field_message(key: str, candidates: Sequence[str]) -> tuple[str, str | None]:
    """(message, suggestion) for a key no field of a model takes: ``unknown field 'detla'; did
    you mean 'delta'?`` when one of ``candidates`` (the model's names and aliases the input did
    not give) is close to it (difflib's ratio >= 0.6), else ``unknown field 'x'``."""
    close = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    message = f"unknown field {shown(key)!r}"
    if close:
        return f"{message}; did you mean {close[0]!r}?", close[0]
    return message, None


def validation_error_location(loc: Sequence[Any]) -> list[str]:
    """A pydantic error's location as the user's field path: union-member tags dropped, each
    part cut to :data:`SHOWN_CHARS` (an unknown key may be any length)."""
    return [shown(part) for part in loc if not _UNION_MEMBER_TAG.match(str(part))]


def validation_error_message(error: Mapping[str, Any]) -> str:
    """A pydantic error's message without pydantic's ``Value error, `` prefix."""
    message = str(error.get("msg", "invalid value"))
    for prefix in _MESSAGE_PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def validation_error_line(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(field path, message) of the first of pydantic's ``errors``, the message ending in
    ``(and N more)`` when there are more; the field is ``""`` for an error of the whole input."""
    if not errors:
        return "", "invalid value"
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ".".join(validation_error_location(first.get("loc", ()))), validation_error_message(first) + more


def located_validation_error(title: str, errors: Sequence[tuple[Sequence[str | int], str, Any]]) -> Any:
    """A pydantic ``ValidationError`` of ``(location, message, input)`` errors: a validator
    raises it to put an error at a field below the one it validates (pydantic re-bases the
    locations at the validator's own). The messages are kept verbatim."""
    from pydantic import ValidationError
    from pydantic_core import PydanticCustomError

    return ValidationError.from_exception_data(
        title,
        [{"type": PydanticCustomError("value_error", message), "loc": tuple(loc), "input": value}
         for loc, message, value in errors],
    )


def one_error_for_union(accepts: str) -> Any:
    """A pydantic ``WrapValidator`` for a union-typed field: one error at the field the user
    wrote, ``must be {accepts}``, instead of one per union member under pydantic's member
    tags (``keep_ratios.list[float]: Input should be a valid list (and 1 more)``).

    When a member got inside the value (a mapping's key, a list's item, a model's field),
    its errors there are the ones kept, at their path below the field
    (``lambdas.a: Input should be greater than or equal to 0``): the value had that
    member's shape, so they say what to fix better than ``must be ...`` would.
    """
    from pydantic import ValidationError, ValidatorFunctionWrapHandler, WrapValidator
    from pydantic_core import PydanticCustomError

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            # a member's error is located (member tag, path inside the value ...)
            inside = [e for e in exc.errors(include_url=False) if len(e["loc"]) > 1]
            if not inside:
                raise PydanticCustomError("union_value", "must be {accepts}", {"accepts": accepts}) from None
            member = inside[0]["loc"][0]
            raise located_validation_error(
                exc.title, [(e["loc"][1:], validation_error_message(e), e["input"]) for e in inside if e["loc"][0] == member]
            ) from None

    return WrapValidator(validate)


def install_hint(extra: str) -> str:
    """How to install the optional dependencies ``extra`` (pyproject.toml's extras), from a
    package index and from a checkout: ``pip install 'gdpfed[trainer]' (from a checkout:
    pip install -e ".[trainer]")``. The missing-extra errors of ``gdpfed`` (docs/architecture.md
    §The command line) say both because ``gdpfed[trainer]`` alone fails in a clone: pip looks
    for gdpfed on the index, where the checkout's code is not."""
    return f"pip install 'gdpfed[{extra}]' (from a checkout: pip install -e \".[{extra}]\")"


def log_fallback_detail(accountant: str, detail: str) -> None:
    """Log at debug level the internal detail (an exception's type and text) behind a fallback
    whose ``reason`` states for users what could not be represented and what answered instead
    (docs/accounting.md §5.3, §13.4): the detail is for developers, never the CLI or HTTP answer."""
    import logging  # start-up time: only a fallback loads logging

    logging.getLogger("gdpfed.accounting").debug("%s fell back: %s", accountant, detail)
