"""Working sets beside other projecting processes: the rows' versions, kept while a working set may read as of a
seq before the write that replaced them, instead of the copies kept for one checkpoint (issue 37).

Revision ID: i37_10_record_versions
Revises: i37_9_projectors
Create Date: 2026-12-01

`state_records_before` goes with its floor (`records-before`): the next start of a working set loads its
newest checkpoint only after a clean stop (one saved at the rows' watermark), else it replays the log once.
`state_projectors` gains each working set's head (state/store/row_versions.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_10_record_versions"
down_revision: str | Sequence[str] | None = "i37_9_projectors"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "state_record_versions",
        sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("id", _ID, primary_key=True),
        sa.Column("until", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_state_record_versions_until", "state_record_versions", ["until"])
    op.drop_table("state_records_before")
    op.execute("DELETE FROM state_projections WHERE name = 'records-before'")
    with op.batch_alter_table("state_projectors") as batch:
        batch.add_column(sa.Column("head", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("state_projectors") as batch:
        batch.drop_column("head")
    op.execute("DELETE FROM state_projections WHERE name IN ('versions-floor', 'versions-pruned')")
    op.drop_index("ix_state_record_versions_until", "state_record_versions")
    op.drop_table("state_record_versions")
    op.create_table(
        "state_records_before",
        sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("id", _ID, primary_key=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
    )
