"""Plans gain a re-plan fence: new rounds wait while a re-plan of the plan is computed.

Revision ID: 0003_plan_replan_fence
Revises: 0002_ledger_round_status
Create Date: 2026-11-22
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0003_plan_replan_fence"
down_revision: Union[str, None] = "0002_ledger_round_status"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("replan_fence_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("replan_fence_until")
