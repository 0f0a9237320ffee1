"""The processes projecting the state store, one row each while it runs, so `up --working-set` and the others
refuse, in one line, to start beside each other (issue 37).

Revision ID: i37_9_projectors
Revises: i37_8_records_before
Create Date: 2026-11-30

An operational table (state/ops/projectors.py): replay neither reads nor rebuilds it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i37_9_projectors"
down_revision: str | Sequence[str] | None = "i37_8_records_before"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "state_projectors",
        sa.Column("holder", sa.String(200), primary_key=True),
        sa.Column("working_set", sa.Boolean(), nullable=False),
        sa.Column("beat_ms", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("state_projectors")
