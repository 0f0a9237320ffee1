"""The state store's wants by ref: a row per (ref, want) naming it, so a replica lists the wants of a ref by
a range scan, not a walk of every want (issue 37).

Revision ID: i37_6_want_refs
Revises: i37_5_record_closed
Create Date: 2026-11-29

Empty until a projector of the format that writes it (7) clears the rows of the older one (6) and writes
every record again (state/store/records.py, `take_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_6_want_refs"
down_revision: str | Sequence[str] | None = "i37_5_record_closed"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    text = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
    op.create_table(
        "state_want_refs",
        sa.Column("ref", text, primary_key=True),
        sa.Column("created", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("want_id", text, primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("state_want_refs")
