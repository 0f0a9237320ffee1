"""API tokens and the session-signing key (access control).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

Additive: a database at 0003 upgrades in place and, having no tokens, keeps its open access.
The signing key is not created here (an offline SQL script would carry it in clear): the token
store creates it on first use.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("revoked_ms", sa.BigInteger(), nullable=True),
    )
    op.create_index("ix_api_tokens_hash", "api_tokens", ["token_hash"], unique=True)
    op.create_table(
        "session_keys",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("signing_key", sa.String(64), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name="session_keys_single_row"),
    )


def downgrade() -> None:
    op.drop_table("session_keys")
    op.drop_index("ix_api_tokens_hash", table_name="api_tokens")
    op.drop_table("api_tokens")
