"""``GET /healthz`` (open) and ``GET /metrics`` (open unless ``metrics_require_key``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlalchemy import text

from app.db import read_session
from app.deps import State, authenticate

router = APIRouter(tags=["operations"])

_bearer = HTTPBearer(auto_error=False)
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False)


class Health(BaseModel):
    status: str
    database: str


@router.get("/healthz", response_model=Health, summary="liveness and database check (no key)")
def healthz(state: State) -> Health:
    with read_session(state.sessions) as session:
        session.execute(text("SELECT 1"))
    return Health(status="ok", database=state.engine.dialect.name)


@router.get(
    "/metrics",
    summary="Prometheus metrics (text format)",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus exposition format"}},
)
def metrics(
    state: State,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    header_key: Annotated[str | None, Depends(_api_key_header)],
) -> Response:
    if state.settings.metrics_require_key:
        authenticate(state, bearer, header_key)
    body, content_type = state.metrics.render()
    return Response(content=body, media_type=content_type)
