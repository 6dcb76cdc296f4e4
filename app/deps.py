"""FastAPI dependencies: the per-app state, database sessions and API-key auth.

Keys are read from ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``. A missing or
unknown key is 401, a key whose role is too low 403 (docs/service.md §Auth).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.compute import ComputePool
from app.db import read_session
from app.errors import ServiceError
from app.metrics import Metrics
from app.models import ApiKey
from app.security import Role, hash_token, role_allows, token_matches
from app.settings import Settings


@dataclass
class AppState:
    """Everything one app instance owns; no module-level globals."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    metrics: Metrics
    compute: ComputePool


@dataclass(frozen=True)
class Principal:
    """The caller, as identified by its API key."""

    name: str
    role: str


async def get_state(request: Request) -> AppState:
    # async: trivial dependencies would otherwise each cost a thread-pool hop.
    state: AppState = request.app.state.gdpfed
    return state


State = Annotated[AppState, Depends(get_state)]


def get_read_session(state: State) -> Iterator[Session]:
    with read_session(state.sessions) as session:
        yield session


ReadSession = Annotated[Session, Depends(get_read_session)]

_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="the API key")


def _unauthorized(message: str) -> ServiceError:
    return ServiceError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def authenticate(
    state: State,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    header_key: Annotated[str | None, Depends(_api_key_header)],
) -> Principal:
    token = bearer.credentials if bearer is not None else header_key
    if not token:
        raise _unauthorized("missing API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
    if len(token) > 512:
        raise _unauthorized("invalid API key")
    with read_session(state.sessions) as session:
        key = find_key(session, token)
        if key is None:
            raise _unauthorized("invalid or revoked API key")
        return Principal(name=key.name, role=key.role)


def find_key(session: Session, token: str) -> ApiKey | None:
    """The active key whose hash matches ``token``, or None.

    The lookup is by the token's SHA-256 (indexed); the match is confirmed with a
    constant-time comparison. Timing of the index lookup can only leak bits of a hash of
    a 256-bit random token, which do not help find the token.
    """
    key = session.scalar(select(ApiKey).where(ApiKey.token_sha256 == hash_token(token)))
    if key is None or key.revoked_at is not None or not token_matches(token, key.token_sha256):
        return None
    return key


def require(role: Role) -> Callable[..., Awaitable[Principal]]:
    """A dependency that admits keys whose role includes ``role``."""

    async def check(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
        if not role_allows(principal.role, role):
            raise ServiceError(
                403, "forbidden", f"this endpoint needs the {role!r} role; key "
                f"{principal.name!r} has {principal.role!r}"
            )
        return principal

    return check


PlannerKey = Annotated[Principal, Depends(require("planner"))]
OperatorKey = Annotated[Principal, Depends(require("operator"))]


def _query_parameter_names(dependant: Dependant) -> set[str]:
    """The query parameters a route takes, its dependencies' included, by alias (walked here:
    FastAPI's own flattening helper is not public and went away in newer releases)."""
    names = {param.alias for param in dependant.query_params}
    for dependency in dependant.dependencies:
        names |= _query_parameter_names(dependency)
    return names


def refuse_unknown_query_parameters(request: Request) -> None:
    """Answer 422 naming a query parameter the route does not take (docs/service.md §Errors).

    Starlette passes unknown query parameters through and FastAPI ignores them, so a typo
    (``?populaton_id=...``) would silently widen a listing instead of filtering it.
    """
    route = request.scope.get("route")
    if not request.query_params or not isinstance(route, APIRoute):
        return
    known = _query_parameter_names(route.dependant)
    for name in request.query_params:
        if name not in known:
            takes = ", ".join(sorted(known)) if known else "none"
            raise ServiceError(422, "invalid_input", f"{name}: unknown query parameter (this endpoint takes: {takes})",
                               field=name)
