"""Initial schema: API keys, populations, plans, ledger.

Revision ID: 0001_initial
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: Union[str, None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(64), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("token_sha256"),
    )
    op.create_table(
        "populations",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("system", sa.JSON(), nullable=False),
        sa.Column("active_plan_id", sa.String(32), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(64), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("id"),
    )
    op.create_table(
        "population_groups",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "population_pk",
            sa.Integer(),
            sa.ForeignKey("populations.pk", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.String(64), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=True),
        sa.Column("num_clients", sa.Integer(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.UniqueConstraint("population_pk", "group_id", name="uq_population_group"),
    )
    op.create_index("ix_population_groups_population_pk", "population_groups", ["population_pk"])
    op.create_table(
        "population_changes",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "population_pk",
            sa.Integer(),
            sa.ForeignKey("populations.pk", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("group_id", sa.String(64), nullable=True),
        sa.Column("field", sa.String(64), nullable=False),
        sa.Column("old_value", sa.JSON(), nullable=True),
        sa.Column("new_value", sa.JSON(), nullable=True),
        sa.Column("plan_id", sa.String(32), nullable=True),
    )
    op.create_index("ix_population_changes_population_pk", "population_changes", ["population_pk"])
    op.create_table(
        "plans",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(64), nullable=True),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("accountant", sa.String(16), nullable=False),
        sa.Column("start_round", sa.Integer(), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.String(32), sa.ForeignKey("plans.id"), nullable=True),
        sa.Column(
            "population_id",
            sa.String(32),
            sa.ForeignKey("populations.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.UniqueConstraint("id"),
    )
    op.create_index("ix_plans_parent_id", "plans", ["parent_id"])
    op.create_index("ix_plans_population_id", "plans", ["population_id"])
    op.create_table(
        "ledger_rounds",
        sa.Column("pk", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "plan_id", sa.String(32), sa.ForeignKey("plans.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("round_index", sa.Integer(), nullable=False),
        sa.Column("aborted_pools", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reported_by", sa.String(64), nullable=True),
        sa.UniqueConstraint("plan_id", "round_index", name="uq_ledger_plan_round"),
    )
    op.create_index("ix_ledger_rounds_plan_id", "ledger_rounds", ["plan_id"])


def downgrade() -> None:
    op.drop_index("ix_ledger_rounds_plan_id", table_name="ledger_rounds")
    op.drop_table("ledger_rounds")
    op.drop_index("ix_plans_population_id", table_name="plans")
    op.drop_index("ix_plans_parent_id", table_name="plans")
    op.drop_table("plans")
    op.drop_index("ix_population_changes_population_pk", table_name="population_changes")
    op.drop_table("population_changes")
    op.drop_index("ix_population_groups_population_pk", table_name="population_groups")
    op.drop_table("population_groups")
    op.drop_table("populations")
    op.drop_table("api_keys")
