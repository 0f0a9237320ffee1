"""Webhook deliveries: offsets, RQ/DLQ messages and group state, control rows, signing secrets.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

Additive: nothing but subscriptions' delivery shards uses these tables, so a database
at 0002 upgrades in place with its events, snapshots and group members.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    _create_offset_tables()
    _create_queue_tables()


def _create_offset_tables() -> None:
    op.create_table(
        "delivery_offsets",
        sa.Column("subscription", sa.String(100), primary_key=True),
        sa.Column("topic", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("partition", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "delivery_control",
        sa.Column("subscription", sa.String(100), primary_key=True),
        sa.Column("applied_seq", sa.BigInteger(), nullable=False),
        sa.Column("main_floor", sa.BigInteger(), nullable=False),
        sa.Column("delivered", sa.BigInteger(), nullable=False),
        sa.Column("retried", sa.BigInteger(), nullable=False),
        sa.Column("dead_lettered", sa.BigInteger(), nullable=False),
    )


def _create_queue_tables() -> None:
    op.create_table(
        "delivery_heads",
        sa.Column("subscription", sa.String(100), primary_key=True),
        sa.Column("queue", sa.String(3), primary_key=True),
        sa.Column("topic", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("partition", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "delivery_messages",
        sa.Column("subscription", sa.String(100), primary_key=True),
        sa.Column("queue", sa.String(3), primary_key=True),
        sa.Column("topic", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("partition", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("offset", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("group_hash", sa.BigInteger(), nullable=False),
        sa.Column("event_seq", sa.BigInteger(), nullable=False),
        sa.Column("main_topic", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("not_before_ms", sa.BigInteger(), nullable=False),
        sa.Column("first_failed_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
    )
    op.create_index("ix_delivery_messages_group", "delivery_messages", ["subscription", "queue", "group_key"])
    op.create_table(
        "delivery_groups",
        sa.Column("subscription", sa.String(100), primary_key=True),
        sa.Column("queue", sa.String(3), primary_key=True),
        sa.Column("group_key", sa.Text(), primary_key=True),
        sa.Column("group_hash", sa.BigInteger(), nullable=False),
        sa.Column("p_main_topic", sa.Integer(), nullable=False),
        sa.Column("p_main_offset", sa.BigInteger(), nullable=False),
        sa.Column("p_topic", sa.Integer(), nullable=False),
        sa.Column("p_offset", sa.BigInteger(), nullable=False),
        sa.Column("c_main_topic", sa.Integer(), nullable=False),
        sa.Column("c_main_offset", sa.BigInteger(), nullable=False),
        sa.Column("c_topic", sa.Integer(), nullable=False),
        sa.Column("c_offset", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "delivery_secrets",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("secret", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("delivery_secrets")
    op.drop_table("delivery_groups")
    op.drop_table("delivery_messages")
    op.drop_table("delivery_heads")
    op.drop_table("delivery_control")
    op.drop_table("delivery_offsets")
