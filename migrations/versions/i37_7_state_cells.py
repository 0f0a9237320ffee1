"""The state store's grid cells: each ref's cell, its readers' instance's latest checks and the seq since which
both have held, so a read replica's status grid, now or as of a seq, filtered by a check or not, is a range scan
(issue 37).

Revision ID: i37_7_state_cells
Revises: i37_6_want_refs
Create Date: 2026-11-29

Empty until a projector of the format that writes it (8) clears the rows of the older one (7) and writes
every record again (state/store/records.py, `take_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_7_state_cells"
down_revision: str | Sequence[str] | None = "i37_6_want_refs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    text = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
    op.create_table(
        "state_cells",
        sa.Column("ref", text, primary_key=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("cell", sa.SmallInteger(), nullable=False),
        sa.Column("since", sa.BigInteger(), nullable=False),
        sa.Column("created", sa.BigInteger(), nullable=False),
        sa.Column("checks", sa.Text(), nullable=True),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("state_cells")
