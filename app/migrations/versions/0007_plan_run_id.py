"""Plans record the run that reports their rounds (docs/ledger.md §4).

``plans.run_id``: the identity (``RoundReport.run_id``) of the run whose round reports the
plan's ledger counts, set by its first report that states one; a report stating another run
is refused, since two runs of one plan would release its rounds twice while the ledger counts
them once. Null for plans whose reports never stated one (every plan stored before this
revision): those keep being reported as before.

Revision ID: 0007_plan_run_id
Revises: 0006_plan_secagg_mechanism
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_plan_run_id"
down_revision: str | None = "0006_plan_secagg_mechanism"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("run_id", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("run_id")
