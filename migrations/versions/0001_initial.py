"""Initial event store: events, log_head (seeded at seq 0) and snapshots.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Migrations are history: they spell out their tables instead of importing
`partbuild.state.schema`, which describes only the newest revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# 64-bit keys are INTEGER on SQLite so they become the rowid (see state/schema.py).
Int64Key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("seq", Int64Key, primary_key=True, autoincrement=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("event_type", sa.String(40), nullable=False),
        sa.Column("recorded_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
    )
    log_head = op.create_table(
        "log_head",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("head_seq", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name="log_head_single_row"),
    )
    op.bulk_insert(log_head, [{"id": 1, "head_seq": 0}])
    op.create_table(
        "snapshots",
        sa.Column("id", Int64Key, primary_key=True, autoincrement=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("format", sa.String(80), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_snapshots_format_seq", "snapshots", ["format", "seq"])


def downgrade() -> None:
    op.drop_index("ix_snapshots_format_seq", table_name="snapshots")
    op.drop_table("snapshots")
    op.drop_table("log_head")
    op.drop_table("events")
