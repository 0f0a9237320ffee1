"""The state store's counts: how many instances, wants and job runs were in each state, by seq (issue 37).

Revision ID: i37_2_state_counts
Revises: i37_1_state_changes
Create Date: 2026-11-29

The counts are projected with the changes, in the same transactions and under the same watermark, so the
changes already projected are projected again with them: this revision empties `state_changes` and its
watermark (a projection holds nothing the log cannot rebuild; `db upgrade` and the next `serve` or `up`
project the log again, and reads answer from the live state meanwhile).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_2_state_counts"
down_revision: str | Sequence[str] | None = "i37_1_state_changes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "state_counts",
        sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("state", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
    )
    op.execute("DELETE FROM state_changes")
    op.execute("DELETE FROM state_projections")


def downgrade() -> None:
    op.drop_table("state_counts")
    op.execute("DELETE FROM state_changes")
    op.execute("DELETE FROM state_projections")
