"""The state store's records: every instance, want, job run and ref, as the live state holds it, and the job
runs' heartbeats (issue 37).

Revision ID: i37_3_state_records
Revises: i37_2_state_counts
Create Date: 2026-11-29

The rows are projected by every `serve` and `up` (and `db upgrade`) under their own watermark (`records` in
`state_projections`): nothing to copy here, the first projector writes them all.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_3_state_records"
down_revision: str | Sequence[str] | None = "i37_2_state_counts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "state_records",
        sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("id", sa.Text().with_variant(sa.Text(collation="C"), "postgresql"), primary_key=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "state_heartbeats",
        sa.Column("run_id", sa.Text().with_variant(sa.Text(collation="C"), "postgresql"), primary_key=True),
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("ms", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("state_heartbeats")
    op.drop_table("state_records")
    op.execute("DELETE FROM state_projections WHERE name LIKE 'records:%'")
