"""The event-sourced core, and beside it the operational stores that replay cannot rebuild.

- `log/`: the event log (append with gapless seqs in commit order, read), snapshots,
  replay, the live state of a process, the digest, audits, the group checker.
- `fold/`: `BuildState`, its records (a subscription's with its settings' rules), the
  handlers by entity and the event registry.
- `rules/`: pure rules (ids, refs, bucketing, worker groups, topics, the grid's shapes,
  redaction): no I/O, no state changes, no import of the other folders.
- `queries/`: reads over the folded state (changes, lineage, listings, staleness,
  wanted, retention): they import the fold and the log, never the other way.
- `ops/`: the operational stores (members, deliveries, tokens, the leader lock by
  backend), reached through `database.Database`, never through `EventLog`.
- `schema.py` (the one SQLAlchemy Core schema), `migrate.py` (Alembic upgrades),
  `db.py` (the one dialect seam), `database.py` (the handle of one database).
"""
