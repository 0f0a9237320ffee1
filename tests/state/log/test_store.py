"""Contract of the event store (EventLog, SnapshotStore, migrations), run on every backend."""

from __future__ import annotations

import io

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from partbuild.proto.v1 import events_pb2 as pb
from partbuild.state.database import Database
from partbuild.state.db import create_engine_for
from partbuild.state.log.store import AppendConflict, AppendResult, EventLog, StoredEvent
from partbuild.state.migrate import (
    SchemaNotReady,
    alembic_config,
    current_revision,
    ensure_schema,
    head_revision,
    upgrade,
)
from partbuild.state.schema import metadata


def want(n: int, *refs: str) -> pb.Event:
    event = pb.Event(event_id=f"evt-{n}", timestamp_ms=1_767_225_600_000 + n)
    event.source.manual.user = "alice"
    event.want_create.want_id = f"want-{n}"
    event.want_create.partition_refs.extend(refs or [f"agg/daily_clicks/date=2026-01-{n % 28 + 1:02d}"])
    return event


def wants(start: int, count: int) -> list[pb.Event]:
    return [want(n) for n in range(start, start + count)]


# --- append and head ---------------------------------------------------------------


def test_empty_log_has_head_zero(event_log: EventLog) -> None:
    assert event_log.head() == 0
    assert event_log.read(after_seq=0, limit=10) == []
    assert list(event_log.iter_payloads()) == []


def test_append_returns_consecutive_seqs(event_log: EventLog) -> None:
    assert event_log.append(wants(0, 3)) == AppendResult(first_seq=1, last_seq=3)
    assert event_log.append(wants(3, 1)) == AppendResult(first_seq=4, last_seq=4)
    assert event_log.append(wants(4, 5)) == AppendResult(first_seq=5, last_seq=9)
    assert event_log.head() == 9
    assert [e.seq for e in event_log.read(0, 100)] == list(range(1, 10))


def test_empty_batch_is_rejected(event_log: EventLog) -> None:
    with pytest.raises(ValueError, match="empty batch"):
        event_log.append([])
    assert event_log.head() == 0


def test_overlong_event_id_is_rejected_on_every_backend(event_log: EventLog) -> None:
    with pytest.raises(ValueError, match="event_id longer than 64"):
        event_log.append([pb.Event(event_id="x" * 65)])
    assert event_log.head() == 0


def test_expected_head_conflict_writes_nothing(event_log: EventLog) -> None:
    event_log.append(wants(0, 2))
    with pytest.raises(AppendConflict) as info:
        event_log.append(wants(2, 3), expected_head=1)
    assert (info.value.expected_head, info.value.actual_head) == (1, 2)
    assert "expected the log head at seq 1, but it is at seq 2" in str(info.value)
    assert event_log.head() == 2
    assert [e.event_id for e in event_log.read(0, 100)] == ["evt-0", "evt-1"]
    # The rolled-back batch gave its seqs back: the next append continues gaplessly.
    assert event_log.append(wants(2, 1), expected_head=2) == AppendResult(3, 3)
    assert [e.seq for e in event_log.read(0, 100)] == [1, 2, 3]


def test_expected_head_zero_on_empty_log(event_log: EventLog) -> None:
    assert event_log.append(wants(0, 1), expected_head=0) == AppendResult(1, 1)
    with pytest.raises(AppendConflict):
        event_log.append(wants(1, 1), expected_head=0)


# --- reading -------------------------------------------------------------------------


def test_stored_columns_and_payload_round_trip(event_log: EventLog) -> None:
    event = want(7, "agg/daily_clicks/date=2026-01-07", "raw/clicks/date=2026-01-07")
    other = pb.Event(event_id="evt-bare")  # no payload set
    event_log.append([event, other])
    first, second = event_log.read(0, 10)
    assert isinstance(first, StoredEvent)
    assert (first.seq, first.event_id, first.event_type) == (1, "evt-7", "want_create")
    assert (second.seq, second.event_id, second.event_type) == (2, "evt-bare", "unknown")
    assert first.payload == event.SerializeToString()
    assert type(first.payload) is bytes
    assert first.to_event() == event
    assert second.to_event() == other
    assert abs(first.recorded_at_ms - second.recorded_at_ms) < 60_000
    assert first.recorded_at_ms > 1_700_000_000_000


def test_binary_payload_is_byte_identical(event_log: EventLog) -> None:
    event = pb.Event(event_id="evt-bin")
    event.partition_observed.partition_ref = "raw/blob/date=2026-01-01"
    event.partition_observed.metadata["bytes"] = "\x00\xff\u2603"
    event_log.append([event])
    [stored] = event_log.read(0, 1)
    assert stored.payload == event.SerializeToString()
    assert [payload for _, payload in event_log.iter_payloads()] == [event.SerializeToString()]


def test_paged_reads(event_log: EventLog) -> None:
    event_log.append(wants(0, 25))
    assert [e.seq for e in event_log.read(after_seq=0, limit=10)] == list(range(1, 11))
    assert [e.seq for e in event_log.read(after_seq=10, limit=10)] == list(range(11, 21))
    assert [e.seq for e in event_log.read(after_seq=20, limit=10)] == list(range(21, 26))
    assert event_log.read(after_seq=25, limit=10) == []
    assert event_log.read(after_seq=1000, limit=10) == []
    assert [e.event_id for e in event_log.read(after_seq=3, limit=2)] == ["evt-3", "evt-4"]


@pytest.mark.parametrize(
    ("after_seq", "limit", "message"),
    [
        (-1, 10, "after_seq must be >= 0, got -1"),
        (0, 0, "limit must be between 1 and 10000, got 0"),
        (0, 10_001, "limit must be between 1 and 10000, got 10001"),
    ],
)
def test_read_validates_arguments(event_log: EventLog, after_seq: int, limit: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        event_log.read(after_seq=after_seq, limit=limit)


def test_read_accepts_the_largest_limit(event_log: EventLog) -> None:
    event_log.append(wants(0, 3))
    assert len(event_log.read(after_seq=0, limit=10_000)) == 3


def test_iter_payloads_pages_and_bounds(event_log: EventLog) -> None:
    batch = wants(0, 23)
    event_log.append(batch)
    expected = [(n + 1, e.SerializeToString()) for n, e in enumerate(batch)]
    assert list(event_log.iter_payloads()) == expected
    assert list(event_log.iter_payloads(page_size=5)) == expected
    assert list(event_log.iter_payloads(page_size=23)) == expected
    assert list(event_log.iter_payloads(after_seq=4, upto_seq=9, page_size=2)) == expected[4:9]
    assert list(event_log.iter_payloads(after_seq=20, upto_seq=100)) == expected[20:]
    assert list(event_log.iter_payloads(after_seq=9, upto_seq=9)) == []
    assert list(event_log.iter_payloads(after_seq=9, upto_seq=3)) == []
    with pytest.raises(ValueError, match="after_seq must be >= 0"):
        list(event_log.iter_payloads(after_seq=-1))
    with pytest.raises(ValueError, match="page_size must be >= 1"):
        list(event_log.iter_payloads(page_size=0))


def test_iter_payloads_defaults_to_the_head_when_called(event_log: EventLog) -> None:
    event_log.append(wants(0, 4))
    payloads = event_log.iter_payloads(page_size=2)
    assert next(payloads)[0] == 1
    event_log.append(wants(4, 4))  # appended mid-replay: beyond the head the replay started at
    assert [seq for seq, _ in payloads] == [2, 3, 4]


# --- snapshots -----------------------------------------------------------------------


def test_snapshots_latest_by_format_and_max_seq(event_log: EventLog) -> None:
    snaps = event_log.snapshots
    assert snaps.latest("state-v1") is None
    snaps.save(10, "state-v1", b"\x00at10")
    snaps.save(30, "state-v1", b"\x00at30")
    snaps.save(20, "state-v1", b"\x00at20")
    snaps.save(40, "state-v2", b"v2at40")
    assert snaps.latest("state-v1") == (30, b"\x00at30")
    assert snaps.latest("state-v2") == (40, b"v2at40")
    assert snaps.latest("state-v1", max_seq=29) == (20, b"\x00at20")
    assert snaps.latest("state-v1", max_seq=10) == (10, b"\x00at10")
    assert snaps.latest("state-v1", max_seq=9) is None
    assert snaps.latest("state-v0") is None  # an unknown format is simply never returned
    with pytest.raises(ValueError, match="seq must be >= 0"):
        snaps.save(-1, "state-v1", b"")


def test_snapshots_prune_keeps_newest_per_format(event_log: EventLog) -> None:
    snaps = event_log.snapshots
    for seq in (5, 1, 4, 2, 3):
        snaps.save(seq, "a", f"a{seq}".encode())
    for seq in (1, 2):
        snaps.save(seq, "b", f"b{seq}".encode())
    assert snaps.prune(keep=2) == 3
    assert snaps.latest("a") == (5, b"a5")
    assert snaps.latest("a", max_seq=4) == (4, b"a4")
    assert snaps.latest("a", max_seq=3) is None
    assert snaps.latest("b", max_seq=1) == (1, b"b1")
    assert snaps.prune(keep=2) == 0
    assert snaps.prune(keep=0) == 4
    assert snaps.latest("a") is None
    with pytest.raises(ValueError, match="keep must be >= 0"):
        snaps.prune(keep=-1)


# --- migrations ----------------------------------------------------------------------


def test_upgrade_is_idempotent(db_url: str) -> None:
    engine = create_engine_for(db_url)
    try:
        assert current_revision(engine) is None
        upgrade(engine)
        assert current_revision(engine) == head_revision()
        upgrade(engine)
        upgrade(db_url)
        ensure_schema(engine, auto_upgrade=False)
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT id, head_seq FROM log_head")).all() == [(1, 0)]
    finally:
        engine.dispose()


def test_migrations_match_the_schema_module(event_log: EventLog) -> None:
    """Alembic's autogenerate finds nothing to change: state/schema.py and the revisions agree."""
    with event_log._engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []


def test_alembic_env_runs_from_a_url_in_the_config(db_url: str) -> None:
    """Plain Alembic usage (no connection passed in): env.py connects by `sqlalchemy.url`."""
    offline = io.StringIO()
    config = alembic_config(db_url)
    config.output_buffer = offline
    command.upgrade(config, "head", sql=True)
    assert "CREATE TABLE events" in offline.getvalue()
    engine = create_engine_for(db_url)
    try:
        assert current_revision(engine) is None  # offline mode touched nothing
        command.upgrade(alembic_config(db_url), "head")
        assert current_revision(engine) == head_revision()
        command.downgrade(alembic_config(db_url), "base")
        assert current_revision(engine) is None
        assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()


def test_ensure_schema_without_auto_upgrade_explains_the_fix(db_url: str) -> None:
    engine = create_engine_for(db_url)
    try:
        with pytest.raises(SchemaNotReady) as info:
            ensure_schema(engine, auto_upgrade=False)
        message = str(info.value)
        assert f"database schema is at revision (none), expected {head_revision()}" in message
        assert "run `partbuild db upgrade --db " in message
        assert current_revision(engine) is None  # nothing was created
        ensure_schema(engine, auto_upgrade=True)
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def test_open_requires_schema_on_postgres_only(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        with EventLog.open(db_url) as log:  # SQLite: upgraded on open by default
            assert log.head() == 0
    else:
        with pytest.raises(SchemaNotReady):
            EventLog.open(db_url)
        upgrade(db_url)
        with Database.open(db_url) as db:
            log = db.log
            assert log.head() == 0


def test_unknown_revision_is_refused(db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine_for(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = 'ffff'"))
        with pytest.raises(SchemaNotReady, match="revision ffff, which this version of partbuild does not"):
            ensure_schema(engine, auto_upgrade=True)
    finally:
        engine.dispose()


def _table_names(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_a_log_at_revision_0001_keeps_working_and_upgrades_with_its_events(db_url: str) -> None:
    """0002 (group_members), 0003 (deliveries) and 0004 (api tokens) are additive: a log from before them
    works, upgrades in place, downgrades back."""
    engine = create_engine_for(db_url)
    try:
        upgrade(engine, "0001")
        assert "group_members" not in _table_names(engine)
        old = EventLog(engine)  # everything but worker groups works without the table
        old.append(wants(0, 3))
        old.snapshots.save(3, "fmt", b"state@3")
        assert [e.event_id for e in old.read(0, 10)] == ["evt-0", "evt-1", "evt-2"]

        upgrade(engine)
        assert current_revision(engine) == head_revision() == "i37_10_record_versions"
        assert {
            "delivery_offsets",
            "delivery_messages",
            "delivery_groups",
            "api_tokens",
            "run_log_lines",
            "state_changes",
            "state_projections",
            "state_counts",
        } <= _table_names(engine)
        with Database.open(db_url, auto_upgrade=False) as db:
            log = db.log
            assert [e.event_id for e in log.read(0, 10)] == ["evt-0", "evt-1", "evt-2"]
            assert log.snapshots.latest("fmt") == (3, b"state@3")
            assert log.append(wants(3, 1)) == AppendResult(first_seq=4, last_seq=4)
            assert db.members.members("g") == []
            assert db.tokens.all() == []  # no tokens: open access, as before the upgrade

        command.downgrade(alembic_config(db_url), "0001")
        assert current_revision(engine) == "0001"
        assert not {"group_members", "delivery_messages", "api_tokens", "state_changes"} & _table_names(engine)
        assert old.head() == 4
    finally:
        engine.dispose()


def test_tables_live_in_the_backend_the_url_names(event_log: EventLog, db_url: str) -> None:
    """The postgres URL's search_path isolates the tables and alembic_version in its own schema."""
    deliveries = {"delivery_offsets", "delivery_control", "delivery_heads", "delivery_messages", "delivery_groups"}
    expected = {"alembic_version", "events", "log_head", "snapshots", "group_members", "delivery_secrets", *deliveries}
    expected |= {"api_tokens", "session_keys", "source_file_digests", "source_partition_digests", "run_log_lines"}
    expected |= {"state_changes", "state_projections", "state_counts", "state_records", "state_heartbeats"}
    expected |= {"state_want_refs", "state_cells", "state_record_versions", "state_projectors"}
    with event_log._engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            names = conn.execute(sa.text("SELECT name FROM sqlite_master WHERE type = 'table'")).scalars()
            assert set(names) == expected
            return
        schema = conn.execute(sa.text("SELECT current_schema()")).scalar_one()
        assert schema.startswith("pbtest_") and schema in db_url
        query = sa.text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s")
        assert set(conn.execute(query, {"s": schema}).scalars()) == expected
