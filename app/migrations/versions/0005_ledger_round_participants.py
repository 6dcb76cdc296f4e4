"""Round reports of metric plans carry who released (docs/ledger.md §8).

``ledger_rounds.participants``: group id -> the clients that released in the round, for
plans whose privacy unit counts participations; null for every other round (and for every
row stored before this revision, which were all client-level). ``plans.accountant`` may be
null: metric plans' leakages have no (epsilon, delta) accountant.

Revision ID: 0005_ledger_round_participants
Revises: 0004_plan_privacy_unit
Create Date: 2026-11-26
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0005_ledger_round_participants"
down_revision: Union[str, None] = "0004_plan_privacy_unit"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("ledger_rounds") as batch:
        batch.add_column(sa.Column("participants", sa.JSON(), nullable=True))
    with op.batch_alter_table("plans") as batch:
        batch.alter_column("accountant", existing_type=sa.String(16), nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.alter_column("accountant", existing_type=sa.String(16), nullable=False)
    with op.batch_alter_table("ledger_rounds") as batch:
        batch.drop_column("participants")
