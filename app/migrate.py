"""Run the Alembic migrations from the installed package (docs/service.md §Persistence).

No ``alembic.ini`` is needed: the script location is this package's ``migrations``
folder, so ``upgrade_head`` works the same from a checkout, a wheel or the Docker image.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from app.db import advisory_key

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migration revisions found"
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade_head(engine: Engine) -> None:
    """Bring the database at ``engine`` to the newest schema (a no-op when it is there)."""
    if current_revision(engine) == head_revision():
        return
    config = alembic_config()
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # server processes starting together on one database migrate one at a time
            # (the others then find the schema at head); SQLite's DDL takes its write lock
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": advisory_key("gdpfed:migrate")})
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
