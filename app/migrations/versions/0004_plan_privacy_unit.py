"""Plans record their privacy unit (plan schema version 2).

Every plan stored before this revision is a client-level plan (schema version 1 had no
other kind), so existing rows get ``client``; their documents are read as version 2
``client`` plans by ``planner.schema`` (docs/service.md §Persistence).

Revision ID: 0004_plan_privacy_unit
Revises: 0003_plan_replan_fence
Create Date: 2026-11-23
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0004_plan_privacy_unit"
down_revision: Union[str, None] = "0003_plan_replan_fence"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("privacy_unit", sa.String(32), nullable=False, server_default="client"))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("privacy_unit")
