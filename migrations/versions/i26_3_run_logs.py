"""Run logs: the lines each job run logged (issue 26 item 3).

Revision ID: i26_3_run_logs
Revises: i23_2_content_digests
Create Date: 2026-11-26

Additive: only the executor writes this table and the run-log endpoint reads it, so a database at the
previous head upgrades in place; runs before it simply have no lines.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i26_3_run_logs"
down_revision: str | Sequence[str] | None = "i23_2_content_digests"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_log_lines",
        sa.Column("job_run_id", sa.String(64), primary_key=True),
        sa.Column("line_no", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("time_ms", sa.BigInteger(), nullable=False),
        sa.Column("level", sa.String(10), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
    )
    op.create_index("ix_run_log_lines_time", "run_log_lines", ["time_ms"])


def downgrade() -> None:
    op.drop_index("ix_run_log_lines_time", table_name="run_log_lines")
    op.drop_table("run_log_lines")
