"""Plans record the noise mechanism their run executes (docs/ledger.md §4).

``plans.secagg_mechanism``: the secure-aggregation noise mechanism of the run that reports
the plan's rounds (``gaussian_continuous`` or ``skellam``), set by its first round report;
null while no round is reported and for units without secure-aggregation noise. Every
round stored before this revision was reported by a trainer that ran (and said) nothing but
the continuous Gaussian, so client-level plans with rounds get ``gaussian_continuous``.

Revision ID: 0006_plan_secagg_mechanism
Revises: 0005_ledger_round_participants
Create Date: 2026-11-26
"""

from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0006_plan_secagg_mechanism"
down_revision: Union[str, None] = "0005_ledger_round_participants"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("secagg_mechanism", sa.String(32), nullable=True))
    op.execute(
        "UPDATE plans SET secagg_mechanism = 'gaussian_continuous' WHERE privacy_unit = 'client' "
        "AND id IN (SELECT DISTINCT plan_id FROM ledger_rounds)"
    )


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("secagg_mechanism")
