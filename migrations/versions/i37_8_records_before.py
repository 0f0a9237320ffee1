"""The state store's rows as they were at a working set's newest checkpoint, copied by the write that first changes
or deletes each after it, so `up --working-set` restarts after a crash from that checkpoint, not from seq 0
(issue 37).

Revision ID: i37_8_records_before
Revises: i37_7_state_cells
Create Date: 2026-11-30

Empty until a working set saves a checkpoint (state/store/rows_before.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_8_records_before"
down_revision: str | Sequence[str] | None = "i37_7_state_cells"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "state_records_before",
        sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("id", sa.Text().with_variant(sa.Text(collation="C"), "postgresql"), primary_key=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("state_records_before")
