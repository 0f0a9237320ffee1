"""Content digests of source files and partitions (issue 23 item 2: a touched file rebuilds nothing).

Revision ID: i23_2_content_digests
Revises: 0004
Create Date: 2026-11-26

Additive: only the source scanner's content confirmation uses these tables, so a database at 0004
upgrades in place. Empty, they cost one read of data whose weak version moves.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i23_2_content_digests"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "source_file_digests",
        sa.Column("source_id", sa.String(32), primary_key=True),
        sa.Column("item_id", sa.String(64), primary_key=True),
        sa.Column("directory_id", sa.String(32), nullable=False),
        sa.Column("listed", sa.String(32), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("chunks", sa.LargeBinary(), nullable=False),
        sa.Column("content", sa.String(64), nullable=True),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_source_file_digests_directory", "source_file_digests", ["source_id", "directory_id"])
    op.create_table(
        "source_partition_digests",
        sa.Column("source_id", sa.String(32), primary_key=True),
        sa.Column("directory_id", sa.String(32), primary_key=True),
        sa.Column("version", sa.String(64), primary_key=True),
        sa.Column("content", sa.String(64), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("source_partition_digests")
    op.drop_index("ix_source_file_digests_directory", table_name="source_file_digests")
    op.drop_table("source_file_digests")
