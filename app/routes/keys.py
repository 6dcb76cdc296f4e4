"""``/v1/keys``: operators create, list and revoke API keys (docs/service.md §Auth)."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import OperatorKey, PlannerKey, ReadSession, State
from app.errors import error_responses
from app.schemas import KeyCreate, KeyCreated, KeyIdentity, KeyOut
from app.services import keys as key_service

router = APIRouter(prefix="/v1/keys", tags=["keys"])


@router.post("", status_code=201, response_model=KeyCreated, summary="create an API key (token shown once)",
             responses=error_responses(409, s409="a key of that name exists (field name)"))
def create_key(body: KeyCreate, state: State, caller: OperatorKey) -> KeyCreated:
    key, token = key_service.create_key_committed(state.sessions, body.name, body.role, caller.name)
    return KeyCreated(**KeyOut.model_validate(key, from_attributes=True).model_dump(), token=token)


@router.get("/me", response_model=KeyIdentity, summary="the calling key's name and role")
async def whoami(caller: PlannerKey) -> KeyIdentity:
    return KeyIdentity(name=caller.name, role=caller.role)


@router.get("", response_model=list[KeyOut], summary="list API keys (never their tokens)")
def list_keys(session: ReadSession, _caller: OperatorKey) -> list[KeyOut]:
    return [KeyOut.model_validate(key, from_attributes=True) for key in key_service.list_keys(session)]


@router.delete("/{name}", response_model=KeyOut, summary="revoke an API key", responses=error_responses(404, 409))
def revoke_key(name: str, state: State, _caller: OperatorKey) -> KeyOut:
    key = key_service.revoke_key_committed(state.sessions, name)
    return KeyOut.model_validate(key, from_attributes=True)
