"""Ledger rounds gain a status: a round claimed before it runs ("started") or reported ("completed").

Existing rows were all full reports, so they become "completed" (docs/ledger.md §4).

Revision ID: 0002_ledger_round_status
Revises: 0001_initial
Create Date: 2026-11-22
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0002_ledger_round_status"
down_revision: Union[str, None] = "0001_initial"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("ledger_rounds") as batch:
        batch.add_column(sa.Column("status", sa.String(16), nullable=False, server_default="completed"))


def downgrade() -> None:
    with op.batch_alter_table("ledger_rounds") as batch:
        batch.drop_column("status")
