"""Alembic environment for the gdpfed service (docs/service.md §Persistence).

``app.migrate.upgrade_head`` hands an open connection in ``config.attributes``; the
``alembic`` command line (with ``-c app/migrations/alembic.ini``) uses the URL from
``GDPFED_DATABASE_URL`` or the ini file instead.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection

from app.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    url = os.environ.get("GDPFED_DATABASE_URL") or config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from app.db import make_engine

    url = os.environ.get("GDPFED_DATABASE_URL") or config.get_main_option("sqlalchemy.url")
    engine = make_engine(url or "sqlite:///./gdpfed.db")
    with engine.connect() as conn:
        _run(conn)
        conn.commit()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
