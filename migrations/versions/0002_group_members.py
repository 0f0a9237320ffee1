"""Worker groups: group_members, one row per live member, updated by its heartbeats.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

Additive: the event log's tables are untouched, so a database at 0001 upgrades in
place with its events and snapshots, and nothing but worker groups uses the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "group_members",
        sa.Column("group_name", sa.String(64), primary_key=True),
        sa.Column("task_id", sa.String(100), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_heartbeat_ms", sa.BigInteger(), nullable=False),
        sa.Column("buckets", sa.Integer(), nullable=True),
        sa.Column("info", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("group_members")
