"""The state store's records carry their created seq, indexed: a replica lists wants, runs and refs from the
store without walking them (issue 37).

Revision ID: i37_4_record_created
Revises: i37_3_state_records
Create Date: 2026-11-29

Rows written before have no `created`: their format (4) is older than the one that writes it (5), so the first
projector of the new version clears them and writes every record again (state/store/records.py, `take_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_4_record_created"
down_revision: str | Sequence[str] | None = "i37_3_state_records"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("state_records") as batch:
        batch.add_column(sa.Column("created", sa.BigInteger(), nullable=True))
    op.create_index("ix_state_records_created", "state_records", ["kind", "created", "id"])


def downgrade() -> None:
    op.drop_index("ix_state_records_created", table_name="state_records")
    with op.batch_alter_table("state_records") as batch:
        batch.drop_column("created")
