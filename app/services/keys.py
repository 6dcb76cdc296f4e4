"""API keys: create, find by token, list, revoke; the initial operator key (docs/service.md §Auth)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.db import serialize, with_busy_retry, write_transaction
from app.errors import conflict, not_found
from app.models import ApiKey, utc_now
from app.security import Role, hash_token, new_token

INITIAL_KEY_NAME = "initial-operator"


def create_key(session: Session, name: str, role: Role, created_by: str | None,
               token: str | None = None) -> tuple[ApiKey, str]:
    """Store a new key (its hash only) and return it with the token, shown this once.

    The name of a *revoked* key can be used again (rotation: revoke, then create a key
    with the same name); the revoked row keeps its history under ``NAME~revoked-PK``.
    """
    existing = session.scalar(select(ApiKey).where(ApiKey.name == name))
    if existing is not None:
        if existing.revoked_at is None:
            raise conflict(f"an API key named {name!r} already exists; revoke it first to reuse the name",
                           field="name")
        suffix = f"~revoked-{existing.pk}"
        existing.name = existing.name[: 64 - len(suffix)] + suffix
        session.flush()
    token = token if token is not None else new_token()
    key = ApiKey(name=name, role=role, token_sha256=hash_token(token), created_by=created_by)
    session.add(key)
    session.flush()
    return key, token


def create_key_committed(factory: sessionmaker[Session], name: str, role: Role,
                         created_by: str | None) -> tuple[ApiKey, str]:
    def attempt() -> tuple[ApiKey, str]:
        try:
            with write_transaction(factory) as session:
                return create_key(session, name, role, created_by)
        except IntegrityError:
            raise conflict(f"an API key named {name!r} already exists", field="name") from None

    return with_busy_retry(attempt)


def ensure_initial_key(factory: sessionmaker[Session], token: str | None = None) -> str | None:
    """With no key in the database, create the operator key ``initial-operator``.

    Returns its token (to be shown once) or None when keys already exist. The check and
    the insert are one write transaction, so two processes starting together on one
    database create one key, not two.
    """

    def attempt() -> str | None:
        with write_transaction(factory) as session:
            serialize(session, "gdpfed:initial-key")  # PostgreSQL: no row to lock yet
            if session.scalar(select(func.count()).select_from(ApiKey)):
                return None
            _, created = create_key(session, INITIAL_KEY_NAME, "operator", None, token=token)
            return created

    return with_busy_retry(attempt)


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.pk)))


def revoke_key(session: Session, name: str) -> ApiKey:
    """Revoke ``name``; never the last active operator key (that would lock every operator out)."""
    key = session.scalar(select(ApiKey).where(ApiKey.name == name).with_for_update())
    if key is None:
        raise not_found("API key", name)
    if key.revoked_at is None:
        if key.role == "operator":
            # Lock every active operator key, so two revocations of different operator keys
            # cannot each see the other still active and together leave none (PostgreSQL).
            operators = len(list(session.scalars(
                select(ApiKey.pk).where(ApiKey.role == "operator", ApiKey.revoked_at.is_(None)).with_for_update()
            )))
            if operators <= 1:
                raise conflict(
                    f"{name!r} is the last active operator key; create another operator key before revoking it",
                    field="name",
                )
        key.revoked_at = utc_now()
    return key


def revoke_key_committed(factory: sessionmaker[Session], name: str) -> ApiKey:
    def attempt() -> ApiKey:
        with write_transaction(factory) as session:
            return revoke_key(session, name)

    return with_busy_retry(attempt)
