"""Database tables (SQLAlchemy 2 typed declarative models); docs/service.md §Persistence.

The schema is created and changed only by the Alembic revisions in ``app/migrations``;
``tests/app/test_migrations.py`` checks that these models and the migrations agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from planner.units import DEFAULT_UNIT


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """SQLite returns naive datetimes; every stored time is UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class ApiKey(Base):
    """An API key: only the SHA-256 of the token is stored (docs/service.md §Auth)."""

    __tablename__ = "api_keys"

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    created_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Population(Base):
    """A budget registry entry: system parameters here, groups in ``population_groups``.

    ``active_plan_id`` is kept consistent by the service (a foreign key would make the
    two tables reference each other, which SQLite cannot add after creation).
    ``version`` is bumped by every change so that two concurrent changes cannot both
    re-plan from the same active plan (optimistic locking).
    """

    __tablename__ = "populations"

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(32), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    method: Mapped[str] = mapped_column(String(32))
    system: Mapped[dict[str, Any]] = mapped_column(JSON)
    active_plan_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    created_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)

    __mapper_args__ = {"version_id_col": version}


class PopulationGroup(Base):
    """One group of a population; ``options`` holds the GroupSpec fields other than these."""

    __tablename__ = "population_groups"
    __table_args__ = (UniqueConstraint("population_pk", "group_id", name="uq_population_group"),)

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    population_pk: Mapped[int] = mapped_column(ForeignKey("populations.pk", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    group_id: Mapped[str] = mapped_column(String(64))
    epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)
    num_clients: Mapped[int] = mapped_column(Integer)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)


class PopulationChange(Base):
    """The change history of a population: who, when, which field, old and new value."""

    __tablename__ = "population_changes"

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    population_pk: Mapped[int] = mapped_column(ForeignKey("populations.pk", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    actor: Mapped[str] = mapped_column(String(64))
    group_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    field: Mapped[str] = mapped_column(String(64))
    old_value: Mapped[Any] = mapped_column(JSON, nullable=True)
    new_value: Mapped[Any] = mapped_column(JSON, nullable=True)
    plan_id: Mapped[str | None] = mapped_column(String(32), nullable=True)


class PlanRecord(Base):
    """A stored plan document; ``parent_id`` links a re-plan to the plan it replaced."""

    __tablename__ = "plans"

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(32), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    created_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    method: Mapped[str] = mapped_column(String(32))
    # whom the plan protects (planner.units); rows from before schema version 2 are the
    # default unit's (client-level; migration 0004)
    privacy_unit: Mapped[str] = mapped_column(String(32), default=DEFAULT_UNIT, server_default=DEFAULT_UNIT)
    # null for units without an (epsilon, delta) accountant (metric leakage; migration 0005)
    accountant: Mapped[str | None] = mapped_column(String(16), nullable=True)
    start_round: Mapped[int] = mapped_column(Integer)
    rounds: Mapped[int] = mapped_column(Integer)
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("plans.id"), nullable=True, index=True)
    population_id: Mapped[str | None] = mapped_column(
        ForeignKey("populations.id", ondelete="SET NULL"), nullable=True, index=True
    )
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    # While a re-plan of this plan is computed, new rounds wait (503 + Retry-After) so the
    # ledger's count the re-plan starts from cannot move under it (docs/ledger.md §4).
    replan_fence_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # The noise mechanism the run reporting this plan's rounds executes (SecaggMechanism), set by
    # its first round report; a later report naming another is refused (docs/ledger.md §4). Null:
    # no round reported yet, or a unit without secure-aggregation noise (migration 0006).
    secagg_mechanism: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # The run reporting this plan's rounds (RoundReport.run_id), set by its first report that
    # names one; a report naming another run is refused, since two runs of one plan release its
    # rounds twice while the ledger counts them once (docs/ledger.md §4; migration 0007).
    run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)


class LedgerRound(Base):
    """One reported training round of a plan; (plan_id, round_index) is the idempotency key."""

    __tablename__ = "ledger_rounds"
    __table_args__ = (UniqueConstraint("plan_id", "round_index", name="uq_ledger_plan_round"),)

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    plan_id: Mapped[str] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    round_index: Mapped[int] = mapped_column(Integer)
    aborted_pools: Mapped[list[Any]] = mapped_column(JSON)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utc_now)
    reported_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # "started": claimed by an attached trainer before it ran the round (counted as spent);
    # "completed": its outcome (aborted pools, metrics) has arrived (docs/ledger.md §4).
    status: Mapped[str] = mapped_column(String(16), default="completed", server_default="completed")
    # plans whose unit counts participations (metric plans): group id -> the clients that
    # released in this round; null when not reported (the round then counts as one release
    # of every client, docs/ledger.md §8)
    participants: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
