"""The state store's records carry the seq a job run or a want ended at, indexed: a replica finds the runs in
flight, and the wants still active, without walking them all (issue 37).

Revision ID: i37_5_record_closed
Revises: i37_4_record_created
Create Date: 2026-11-29

Rows written before have no `closed`: their format (5) is older than the one that writes it (6), so the first
projector of the new version clears them and writes every record again (state/store/records.py, `take_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_5_record_closed"
down_revision: str | Sequence[str] | None = "i37_4_record_created"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("state_records") as batch:
        batch.add_column(sa.Column("closed", sa.BigInteger(), nullable=True))
    # Both indexes hold both seqs and the id: which records were open as of a seq is read from either alone.
    op.drop_index("ix_state_records_created", table_name="state_records")
    op.create_index("ix_state_records_created", "state_records", ["kind", "created", "id", "closed"])
    op.create_index("ix_state_records_closed", "state_records", ["kind", "closed", "created", "id"])


def downgrade() -> None:
    op.drop_index("ix_state_records_closed", table_name="state_records")
    op.drop_index("ix_state_records_created", table_name="state_records")
    op.create_index("ix_state_records_created", "state_records", ["kind", "created", "id"])
    with op.batch_alter_table("state_records") as batch:
        batch.drop_column("closed")
