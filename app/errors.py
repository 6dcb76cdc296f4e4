"""The one place where errors become HTTP responses (docs/service.md §Errors).

Every error body is ``{"code": ..., "message": ..., "field": ...}`` (``field`` only when
one input is to blame). Project errors map to 422, FastAPI's request validation to 422
``invalid_input`` naming the first field, HTTP errors keep their status, and anything
unexpected is logged with its traceback and answered 500 ``internal_error`` without
internals, so no request ever sees a stack trace.
"""

from __future__ import annotations

import logging
from typing import Any

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from accounting.errors import (
    BudgetConflictError,
    GdpfedError,
    InfeasibleError,
    InvalidInputError,
    message_line,
    validation_error_location,
    validation_error_message,
)
from planner.service_api import ErrorBody
from planner.units import UNITS

logger = logging.getLogger("gdpfed.app")

_STATUS_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    429: "too_many_requests",
    503: "unavailable",
}


class ServiceError(GdpfedError):
    """An error raised by the service layer with its HTTP status and stable code.

    A ``GdpfedError``, so the command line (``gdpfed serve --create-key``) reports it as
    a one-line error too.
    """

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field
        self.headers = headers
        self.extra = dict(extra or {})


def not_found(what: str, identifier: str) -> ServiceError:
    return ServiceError(404, "not_found", f"{what} {identifier!r} not found")


def conflict(message: str, field: str | None = None) -> ServiceError:
    return ServiceError(409, "conflict", message, field)


def compute_timeout(seconds: float) -> ServiceError:
    return ServiceError(
        503, "timeout", f"the computation did not finish within {seconds:g} s; retry later "
        "or ask for less (fewer groups, the rdp accountant)"
    )


def superseded(plan_id: str, round_index: int, child_id: str, child_start: int) -> ServiceError:
    """409 for a round that belongs to the plan's re-plan (docs/ledger.md §4)."""
    return ServiceError(
        409, "superseded",
        f"round {round_index} belongs to the re-plan {child_id!r} of plan {plan_id!r} (which starts at "
        f"round {child_start}); fetch that plan and report the round there",
        field="round_index",
        extra={"superseded_by": child_id, "start_round": child_start},
    )


def error_response(status: int, code: str, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None, extra: dict[str, Any] | None = None) -> JSONResponse:
    body = ErrorBody(code=code, message=message_line(message), field=field, **(extra or {}))
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


# What each error status means, for the OpenAPI document: every error response is
# declared with its ErrorBody model (docs/service.md §Errors, §Clients).
ERROR_DESCRIPTIONS: dict[int, str] = {
    401: "missing or invalid API key",
    403: "the key's role does not allow this",
    404: "no such plan, population, group or key (code not_found)",
    409: "the change conflicts with the stored state (code conflict, budget_conflict, superseded, "
    "...; field names the input to blame)",
    413: "request body too large",
    422: "invalid input (code invalid_input, with field) or infeasible plan (code infeasible)",
    503: "the computation ran past its time limit (code timeout), or the plan is being re-planned "
    "(code replanning, with Retry-After)",
}


def error_responses(*statuses: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` declaring each status's body as ``ErrorBody``; ``descriptions``
    (keyed ``s409``) replace the general line where a route knows more."""
    return {
        status: {"model": ErrorBody, "description": descriptions.get(f"s{status}", ERROR_DESCRIPTIONS[status])}
        for status in statuses
    }


def location_to_field(loc: tuple[Any, ...] | list[Any]) -> str | None:
    """``("body", "scenario", "groups", 1, "epsilon")`` -> ``scenario.groups.1.epsilon``;
    ``("body",)`` (an error of the whole body, e.g. a PATCH that changes nothing) -> ``body``."""
    parts = validation_error_location(loc)
    if parts == ["body"]:
        return "body"
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    # a scenario is a union tagged by its privacy unit (app.schemas.PlanCreate): the tag
    # names the model, not a field, so ``scenario.<unit>.silos`` is ``scenario.silos``
    if len(parts) > 1 and parts[0] == "scenario" and parts[1] in UNITS:
        parts = [parts[0], *parts[2:]]
    return ".".join(parts) or None


def validation_response(errors: list[Any]) -> JSONResponse:
    if not errors:
        return error_response(422, "invalid_input", "invalid input")
    first = errors[0]
    field = location_to_field(first.get("loc", ()))
    message = validation_error_message(first)
    if first.get("type") == "json_invalid":
        # FastAPI locates a JSON syntax error at ("body", <offset>); the body is to blame
        field, message = "body", f"the request body is not valid JSON ({message})"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more)"
    return error_response(422, "invalid_input", f"{field}: {message}" if field else message, field)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(_request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.field, exc.headers, exc.extra)

    @app.exception_handler(BudgetConflictError)
    async def _budget(_request: Request, exc: BudgetConflictError) -> JSONResponse:
        return error_response(409, exc.code, exc.message, exc.field)

    @app.exception_handler(InvalidInputError)
    async def _invalid(_request: Request, exc: InvalidInputError) -> JSONResponse:
        return error_response(422, "invalid_input", exc.message, exc.field)

    @app.exception_handler(InfeasibleError)
    async def _infeasible(_request: Request, exc: InfeasibleError) -> JSONResponse:
        return error_response(422, "infeasible", exc.message)

    @app.exception_handler(GdpfedError)
    async def _gdpfed(_request: Request, exc: GdpfedError) -> JSONResponse:
        return error_response(422, exc.code or "invalid_input", exc.message)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_response(list(exc.errors()))

    @app.exception_handler(pydantic.ValidationError)
    async def _pydantic(_request: Request, exc: pydantic.ValidationError) -> JSONResponse:
        return validation_response(exc.errors(include_url=False))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return error_response(exc.status_code, code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error in %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error; the server logged the details")
