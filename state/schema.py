"""The one SQLAlchemy Core schema: the event log and the operational tables. Alembic owns how it gets created.

The log's tables (`events`, `log_head`, `snapshots`) hold the truth; the operational
tables beside them (`group_members`, the `delivery_*` tables, `api_tokens`,
`session_keys`, the `source_*_digests` tables) hold what replay cannot rebuild (state/ops/).

Dialect differences are expressed only in column types. On SQLite a 64-bit key
column is declared INTEGER so that it becomes the table's rowid: `events.seq` then
needs no separate primary-key index (append speed) and `snapshots.id` can
autoincrement (SQLite only does that for INTEGER PRIMARY KEY; its INTEGER is 64-bit).
"""

from __future__ import annotations

import sqlalchemy as sa

Int64Key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

metadata = sa.MetaData()

# One row per event: the serialized `pb.Event` plus the few columns we query by.
# `seq` is assigned by the appender from `log_head`, never by the database, so it is
# gapless and in commit order. No secondary indexes: every one slows every append.
events = sa.Table(
    "events",
    metadata,
    sa.Column("seq", Int64Key, primary_key=True, autoincrement=False),
    sa.Column("event_id", sa.String(64), nullable=False),
    sa.Column("event_type", sa.String(40), nullable=False),
    sa.Column("recorded_at_ms", sa.BigInteger(), nullable=False),
    sa.Column("payload", sa.LargeBinary(), nullable=False),
)

# A single row (id = 1): the last assigned seq. Updating it is the append lock.
log_head = sa.Table(
    "log_head",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("head_seq", sa.BigInteger(), nullable=False),
    sa.CheckConstraint("id = 1", name="log_head_single_row"),
)

# Cached serialized BuildState at a log position. `format` names the producer's
# serialization version; a reader only ever asks for the format it understands.
snapshots = sa.Table(
    "snapshots",
    metadata,
    sa.Column("id", Int64Key, primary_key=True, autoincrement=True),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("format", sa.String(80), nullable=False),
    sa.Column("created_at_ms", sa.BigInteger(), nullable=True),
    sa.Column("payload", sa.LargeBinary(), nullable=False),
    sa.Index("ix_snapshots_format_seq", "format", "seq"),
)

# One row per live member of a worker group: who it is and when it last said so.
# Heartbeats update this row, not the event log (they would flood it), and only
# last_heartbeat_ms changes: no index covers it, so PostgreSQL can update in place
# (HOT). The primary key's group_name prefix serves every per-group query. A row
# is deleted when its member leaves, when a reaper finds it older than the member
# timeout, or by the member itself when it finds its own row already that old.
group_members = sa.Table(
    "group_members",
    metadata,
    sa.Column("group_name", sa.String(64), primary_key=True),
    sa.Column("task_id", sa.String(100), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    sa.Column("started_ms", sa.BigInteger(), nullable=False),
    sa.Column("last_heartbeat_ms", sa.BigInteger(), nullable=False),
    sa.Column("buckets", sa.Integer(), nullable=True),
    sa.Column("info", sa.Text(), nullable=False),
)

# ----------------------------------------------------------------- processes projecting the state store
# One row per process projecting the database's state store (`serve`, `up`), beaten while it runs
# (state/ops/projectors.py). `head`: a working set's, the least seq it may still read its cold records back as
# of (the rows' writers keep their versions from there: state/store/row_versions.py). A row not beaten within
# `PROJECTOR_STALE_MS` is a process gone: ignored by starts and by the versions kept.
state_projectors = sa.Table(
    "state_projectors",
    metadata,
    sa.Column("holder", sa.String(200), primary_key=True),
    sa.Column("working_set", sa.Boolean(), nullable=False),
    sa.Column("beat_ms", sa.BigInteger(), nullable=False),
    sa.Column("head", sa.BigInteger(), nullable=True),
)
PROJECTOR_STALE_MS = 30_000  # six beats missed (state/ops/projectors.py beats every 5 s)

# ----------------------------------------------------------------- webhook deliveries
# Where each subscription's deliveries stand. `subscription` is the subscription's key
# (`name@created_seq`, so a name made again starts clean). The rows change with every
# delivery, so they are not events; each change is one transaction with the offsets it
# moves past (state/ops/deliveries.py).

# The main topic's read offsets: the last seq handled in each virtual partition of each
# storage topic. A partition without a row is at the subscription's floor (`delivery_control`).
delivery_offsets = sa.Table(
    "delivery_offsets",
    metadata,
    sa.Column("subscription", sa.String(100), primary_key=True),
    sa.Column("topic", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("partition", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
)

# One row per subscription: the last reset event applied (the shards' fence), the main
# topic's floor, and counters every process reads for metrics.
delivery_control = sa.Table(
    "delivery_control",
    metadata,
    sa.Column("subscription", sa.String(100), primary_key=True),
    sa.Column("applied_seq", sa.BigInteger(), nullable=False),
    sa.Column("main_floor", sa.BigInteger(), nullable=False),
    sa.Column("delivered", sa.BigInteger(), nullable=False),
    sa.Column("retried", sa.BigInteger(), nullable=False),
    sa.Column("dead_lettered", sa.BigInteger(), nullable=False),
)

# The next offset of each partition of each storage topic of the RQ and the DLQ.
delivery_heads = sa.Table(
    "delivery_heads",
    metadata,
    sa.Column("subscription", sa.String(100), primary_key=True),
    sa.Column("queue", sa.String(3), primary_key=True),
    sa.Column("topic", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("partition", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("next_offset", sa.BigInteger(), nullable=False),
)

# The messages waiting in the RQ and the DLQ.
delivery_messages = sa.Table(
    "delivery_messages",
    metadata,
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
    sa.Index("ix_delivery_messages_group", "subscription", "queue", "group_key"),
)

# The per-group state of the RQ and the DLQ: p, the position (main topic index and
# seq, internal topic index and offset) of the group's last message produced to the queue;
# c, of its last consumed. A group has messages waiting while p != c; caught-up rows are deleted.
delivery_groups = sa.Table(
    "delivery_groups",
    metadata,
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

# Signing secrets, by the digest the subscription's event names. Never in the log.
delivery_secrets = sa.Table(
    "delivery_secrets",
    metadata,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("secret", sa.Text(), nullable=False),
)

# ----------------------------------------------------------------- access control
# API tokens: only the SHA-256 of a token is stored (tokens are 256-bit random, so a plain hash
# is enough: no guessing to slow down). `name` is the user recorded on events, so a name is
# never reused: a revoked token keeps its row. The unique hash index serves the per-request lookup.
api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False),
    sa.Column("created_ms", sa.BigInteger(), nullable=False),
    sa.Column("revoked_ms", sa.BigInteger(), nullable=True),
    sa.Index("ix_api_tokens_hash", "token_hash", unique=True),
)

# A single row (id = 1): the random key that signs the web UI's session cookies, one per database,
# so every process serving the database accepts the others' sessions. Created on first use.
session_keys = sa.Table(
    "session_keys",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("signing_key", sa.String(64), nullable=False),
    sa.Column("created_ms", sa.BigInteger(), nullable=False),
    sa.CheckConstraint("id = 1", name="session_keys_single_row"),
)

# ----------------------------------------------------------------- content digests of source files
# What the source scanner read (issue 23 item 2): facts about content, keyed by weak versions, so a
# touched or copied file is confirmed unchanged by reading it once. Rows are never history: lost,
# they cost a re-read (and a partition whose observed version has no row counts as changed).
# One row per file: its weak version and change stamp as listed, the digests of the chunks read so
# far (a file larger than a pass's budget is finished in later passes), and its digest once whole.
# `source_id` is the BLAKE3 of the source's name, `item_id` the connector's keyed BLAKE3 id of the key,
# `directory_id` the BLAKE3 of the partition directory: no source bytes are stored, and no length limit.
source_file_digests = sa.Table(
    "source_file_digests",
    metadata,
    sa.Column("source_id", sa.String(32), primary_key=True),
    sa.Column("item_id", sa.String(64), primary_key=True),
    sa.Column("directory_id", sa.String(32), nullable=False),
    sa.Column("listed", sa.String(32), nullable=False),
    sa.Column("size", sa.BigInteger(), nullable=False),
    sa.Column("chunks", sa.LargeBinary(), nullable=False),
    sa.Column("content", sa.String(64), nullable=True),
    sa.Column("updated_ms", sa.BigInteger(), nullable=False),
    sa.Index("ix_source_file_digests_directory", "source_id", "directory_id"),
)

# One row per (partition directory, partition version as listed): the digest of its files' contents.
# At most the observed version and the newest are kept per directory.
source_partition_digests = sa.Table(
    "source_partition_digests",
    metadata,
    sa.Column("source_id", sa.String(32), primary_key=True),
    sa.Column("directory_id", sa.String(32), primary_key=True),
    sa.Column("version", sa.String(64), primary_key=True),
    sa.Column("content", sa.String(64), nullable=False),
    sa.Column("updated_ms", sa.BigInteger(), nullable=False),
)

# ----------------------------------------------------------------- run logs
# What each job run logged (issue 26 item 3): its `ctx.log` lines, an error's traceback, the Spark jobs it
# started. Operational, never history: bounded per run by the writer (orchestrator/run_logs.py) and overall
# by age (`RunLogStore.prune`, by `time_ms`, hence its index). Texts are redacted before they get here.
run_log_lines = sa.Table(
    "run_log_lines",
    metadata,
    sa.Column("job_run_id", sa.String(64), primary_key=True),
    sa.Column("line_no", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("time_ms", sa.BigInteger(), nullable=False),
    sa.Column("level", sa.String(10), nullable=False),
    sa.Column("text", sa.Text(), nullable=False),
    sa.Index("ix_run_log_lines_time", "time_ms"),
)

# ----------------------------------------------------------------- the state store (issue 37)
# What changed at each seq, projected from the fold by state/store/: one row per change of an instance, a
# want, a job run or a canonical pointer, keyed as the changes are listed (seq, kind's rank, id). Derived from
# the log, not operational: replay rebuilds it. A page of `/changes` is a range scan of the key, whatever the
# range. Ids are compared byte by byte on both backends (PostgreSQL's "C" collation), as Python compares them.
ByteOrderText = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
state_changes = sa.Table(
    "state_changes",
    metadata,
    sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("id", ByteOrderText, primary_key=True),
    sa.Column("ref", sa.Text(), nullable=True),
    sa.Column("from_state", sa.SmallInteger(), nullable=True),
    sa.Column("to_state", sa.SmallInteger(), nullable=True),
    sa.Column("from_uuid", sa.String(36), nullable=True),
    sa.Column("to_uuid", sa.String(36), nullable=True),
)

# How many records of a kind (0 instances, 1 wants, 2 job runs) were in a state from a seq on (`total`): a row per
# seq at which that count changed, so the counts as of any seq are one index probe per (kind, state).
state_counts = sa.Table(
    "state_counts",
    metadata,
    sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("state", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("total", sa.BigInteger(), nullable=False),
)

# Each record of the live state as of the seq its row was written at (`seq`, at or after the `records` watermark):
# kind 0 an instance, 1 a want, 2 a job run, 3 a ref (its canonical pointer and what it serves), with what reads
# of the past need to tell it as of any earlier seq (its history), encoded (state/store/records.py). `created`:
# the record's created seq (a ref's: a lower bound of its first instance's), indexed, so a replica lists wants
# and runs in creation order, and what was created after a seq, by a range scan (state/store/listing.py).
# `closed`: a job run's or a want's last change once it ended (None while it is active), indexed, so the runs
# in flight and the active wants as of a seq are found without walking every row (state/store/stored.py).
state_records = sa.Table(
    "state_records",
    metadata,
    sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("id", ByteOrderText, primary_key=True),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("body", sa.LargeBinary(), nullable=False),
    sa.Column("created", sa.BigInteger(), nullable=True),
    sa.Column("closed", sa.BigInteger(), nullable=True),
    sa.Index("ix_state_records_created", "kind", "created", "id", "closed"),
    sa.Index("ix_state_records_closed", "kind", "closed", "created", "id"),
)

# The rows of the records a working set reads back (kinds 0 - 3) as they were before a write replaced or deleted
# them: a version holds a row (`seq`, `body`) until the seq of the write that replaced it (`until`). Copied while
# a working set may read as of a seq before that write (its registered head, or the newest checkpoint: the seq in
# `state_projections` under `versions-floor`), pruned once none can (state/store/row_versions.py).
state_record_versions = sa.Table(
    "state_record_versions",
    metadata,
    sa.Column("kind", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("id", ByteOrderText, primary_key=True),
    sa.Column("until", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("body", sa.LargeBinary(), nullable=False),
    sa.Index("ix_state_record_versions_until", "until"),
)

# A job run's heartbeats after the first (the first made it Running: its row says so), one row each: written
# once, never rewritten, so a run's row stays its size however long it runs (state/store/records.py).
state_heartbeats = sa.Table(
    "state_heartbeats",
    metadata,
    sa.Column("run_id", ByteOrderText, primary_key=True),
    sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("ms", sa.BigInteger(), nullable=False),
)

# The wants naming each ref, in creation order (a want's refs never change): a row per (ref, want), written with
# the want's row (state/store/records.py), so a read replica lists a ref's wants by a range scan.
state_want_refs = sa.Table(
    "state_want_refs",
    metadata,
    sa.Column("ref", ByteOrderText, primary_key=True),
    sa.Column("created", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("want_id", ByteOrderText, primary_key=True),
)

# Each ref's grid cell (state/queries/cells.py), the latest checks of the instance its readers get, and the seq
# since which both have held, written with the rows of the ref and of its instances (state/store/cells.py), so a
# read replica's grid, now or as of a seq, filtered by a check or not, is a range scan of these small rows, not
# a read of each ref's and instance's rows. `seq`: the head it was written at.
state_cells = sa.Table(
    "state_cells",
    metadata,
    sa.Column("ref", ByteOrderText, primary_key=True),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.Column("cell", sa.SmallInteger(), nullable=False),
    sa.Column("since", sa.BigInteger(), nullable=False),
    sa.Column("created", sa.BigInteger(), nullable=False),
    sa.Column("checks", sa.Text(), nullable=True),  # the latest checks of the instance readers get (JSON pairs)
    sqlite_with_rowid=False,  # SQLite keeps the rows in key order: a range scan reads one tree, not two
)

# One row per projection: the seq up to which its rows are written (the watermark reads compare with).
state_projections = sa.Table(
    "state_projections",
    metadata,
    sa.Column("name", sa.String(40), primary_key=True),
    sa.Column("seq", sa.BigInteger(), nullable=False),
)
