"""The state store's first table: every change by seq, and the projections' watermarks (issue 37 item 1).

Revision ID: i37_1_state_changes
Revises: i26_3_run_logs
Create Date: 2026-11-28

Additive: the tables start empty with no watermark, and reads answer from the live state until a projector
(`partbuild serve`, `up`, or `db upgrade` for an existing log) has written the changes they ask for.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_1_state_changes"
down_revision: str | Sequence[str] | None = "i26_3_run_logs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "state_changes",
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("id", sa.Text().with_variant(sa.Text(collation="C"), "postgresql"), primary_key=True),
        sa.Column("ref", sa.Text(), nullable=True),
        sa.Column("from_state", sa.SmallInteger(), nullable=True),
        sa.Column("to_state", sa.SmallInteger(), nullable=True),
        sa.Column("from_uuid", sa.String(36), nullable=True),
        sa.Column("to_uuid", sa.String(36), nullable=True),
    )
    op.create_table(
        "state_projections",
        sa.Column("name", sa.String(40), primary_key=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("state_projections")
    op.drop_table("state_changes")
