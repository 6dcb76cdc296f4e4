"""The database engine and transactions (docs/service.md §Persistence).

SQLite (the default) gets WAL journaling, foreign keys and a busy timeout on every
connection. Its driver's own transaction handling is switched off so that this module
emits ``BEGIN`` itself: read transactions use a plain ``BEGIN`` and write transactions
``BEGIN IMMEDIATE``, which takes the write lock up front. Every read-check-write sequence
(is this round already recorded? did the active plan change?) therefore runs against a
state no other writer can change before it commits. On PostgreSQL the same sequences lock
the rows they depend on with ``SELECT ... FOR UPDATE`` (or, where no row exists yet, an
advisory lock: :func:`serialize`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from sqlalchemy import Engine, create_engine, event, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from accounting.errors import InvalidInputError, install_hint
from app.errors import not_found

T = TypeVar("T")

_WRITE_OPTION: Final = "gdpfed_write"


def parse_database_url(database_url: str) -> Any:
    """The parsed URL; ``postgresql://`` / ``postgres://`` mean the psycopg 3 driver (the
    ``postgres`` extra), not SQLAlchemy's default psycopg2. Malformed URLs and drivers that
    are not installed are ``InvalidInputError`` naming ``database-url``."""
    try:
        url = make_url(database_url)
    except ArgumentError:
        raise InvalidInputError(
            "database-url", "cannot parse it; expected e.g. sqlite:///./gdpfed.db or postgresql://user@host/db"
        ) from None
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


def make_engine(database_url: str, busy_timeout_seconds: float = 30.0) -> Engine:
    """An engine for ``database_url`` with the SQLite connection settings described above."""
    url = parse_database_url(database_url)
    if url.get_backend_name() != "sqlite":
        try:
            # Enough connections for the threads that serve requests (uvicorn's thread pool has 40).
            return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=30)
        except (ModuleNotFoundError, NoSuchModuleError) as exc:
            hint = f" ({install_hint('postgres')})" if url.get_backend_name() == "postgresql" else ""
            raise InvalidInputError(
                "database-url", f"the driver for {url.drivername} is not installed{hint}: {exc}"
            ) from None
    engine = create_engine(
        url,
        connect_args={"timeout": busy_timeout_seconds, "check_same_thread": False},
    )
    in_memory = url.database in (None, "", ":memory:")
    busy_ms = int(busy_timeout_seconds * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Autocommit at the driver level: _on_begin below emits BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        write = connection.get_execution_options().get(_WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def read_session(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session for reads; rolled back at the end (it never writes)."""
    with factory() as session:
        yield session


@contextmanager
def write_transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One all-or-nothing write transaction: committed on success, rolled back on any error."""
    with factory() as session:
        session.connection(execution_options={_WRITE_OPTION: True})
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def is_busy_error(exc: BaseException) -> bool:
    """SQLite's 'database is locked' / 'busy' (the busy timeout ran out)."""
    if not isinstance(exc, OperationalError):
        return False
    text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
    return "locked" in text or "busy" in text


def with_busy_retry(fn: Callable[[], T], attempts: int = 5, base_delay: float = 0.05) -> T:
    """Run ``fn`` (one whole transaction) again when SQLite reports the database busy.

    The busy timeout already waits for the lock; this covers the rare case where it runs
    out under heavy contention. Only whole transactions are retried, so a retry never
    applies half of one.
    """
    for attempt in range(attempts):
        try:
            return fn()
        except OperationalError as exc:
            if not is_busy_error(exc) or attempt == attempts - 1:
                raise
            # A per-thread offset spreads the retries of writers that collided together.
            spread = 0.5 + (threading.get_ident() % 97) / 97
            time.sleep(base_delay * (2**attempt) * spread)
    raise AssertionError("unreachable")


def serialize(session: Session, name: str) -> None:
    """Make this write transaction the only one holding ``name`` until it ends.

    PostgreSQL: a transaction-scoped advisory lock (``pg_advisory_xact_lock``), for checks
    that no single row can be locked for (is there any key yet? is the schema migrated?).
    SQLite needs nothing: a write transaction already holds the database's write lock
    (``BEGIN IMMEDIATE``).
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": advisory_key(name)})


def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for ``name`` (PostgreSQL advisory locks take a bigint)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


Row = TypeVar("Row")


def get_or_404(session: Session, model: type[Row], key: str, what: str, *, lock: bool = False) -> Row:
    """The row of ``model`` with primary key ``key`` (``FOR UPDATE`` when ``lock``), or 404."""
    query = select(model).where(model.id == key)  # type: ignore[attr-defined]
    if lock:
        query = query.with_for_update()
    row = session.scalar(query)
    if row is None:
        raise not_found(what, key)
    return row
