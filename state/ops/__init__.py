"""Operational stores: tables that change too often or are too private to be events, so replay cannot rebuild them.

`members` (worker-group heartbeats), `deliveries` (where each subscription's
deliveries stand), `tokens` (API tokens, the session key), `leader_lock/` (a
worker group's leader lock, by backend). They share the log's database and are
reached through `state.database.Database`, never through `EventLog`; like the
log's store they are dialect-neutral SQLAlchemy Core, and what differs per
backend goes through `state/db.py`.

Adding an operational table: the table in `state/schema.py`; an Alembic revision
in `migrations/versions/`; a store class in a module here (its reads and writes,
each write one `begin_write` transaction); an attribute of `Database`
(`state/database.py`) that opens it; and its tests, run on both backends
(the `BACKENDS` fixtures of `tests/conftest.py`).
"""
